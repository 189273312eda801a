//! The access log of the real binary: one JSON line per answered request under the target
//! `access`, naming method, matched route, status, latency and request id.

use serde_json::Value;
use testkit::TestDatabase;
use testkit::captured_log::CapturedLog;

/// The access line of the request `request_id`, parsed.
async fn access_line(log: &CapturedLog, request_id: &str) -> Value {
    let line = log
        .await_line(|line| {
            serde_json::from_str::<Value>(line)
                .is_ok_and(|json| json["target"] == "access" && json["request_id"] == request_id)
        })
        .await;
    serde_json::from_str(&line).expect("a JSON line")
}

#[tokio::test]
async fn every_request_gets_one_json_access_line_with_its_route_status_latency_and_request_id() {
    let db = TestDatabase::create("orders_access_log", &order_service::MIGRATOR).await;
    let port = testkit::free_port();
    let mut command = testkit::service_command_on(
        port,
        env!("CARGO_BIN_EXE_order-service"),
        &db.url,
        testkit::NO_BROKER,
    );
    command
        .env("LOG_FORMAT", "json")
        // Everything else quiet: the access log has its own target and level.
        .env("RUST_LOG", "warn,access=info");
    let (_child, log) = CapturedLog::spawn(&mut command);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    testkit::wait_until_ok(&format!("{base}/healthz")).await;

    let order = "0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80";
    for (method, path, route, status) in [
        (
            "POST",
            "/idempotency-tokens".to_owned(),
            "/idempotency-tokens",
            201u16,
        ),
        ("GET", format!("/orders/{order}"), "/orders/{order_id}", 404),
        ("GET", "/nowhere".to_owned(), "unmatched", 404),
    ] {
        let request_id = uuid::Uuid::new_v4().to_string();
        let response = client
            .request(method.parse().expect("a method"), format!("{base}{path}"))
            .header("x-request-id", &request_id)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), status, "{method} {path}");
        let line = access_line(&log, &request_id).await;
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["route"], route, "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert!(
            line["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
            "{line}"
        );
        let lines = log.lines();
        let of_this_request = lines.iter().filter(|l| l.contains(&request_id)).count();
        assert_eq!(of_this_request, 1, "one line per request: {lines:#?}");
    }
}
