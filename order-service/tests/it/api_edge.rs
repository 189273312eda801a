//! docs/contract.md §3 common rules: request ids, problem+json for 404/405, health, readiness, metrics,
//! and the OpenAPI document with Swagger UI.

use serde_json::Value;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem};

testkit::on_each_backend!(
    every_response_carries_a_request_id,
    unknown_routes_and_wrong_methods_are_problems,
    readiness_names_what_is_down,
    metrics_expose_the_contract_names_from_the_start,
    a_refusal_rewritten_as_a_problem_is_counted_under_its_matched_route,
    the_openapi_document_and_swagger_ui_are_served,
);

async fn every_response_carries_a_request_id(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let given = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "client-chosen-42")
        .send()
        .await
        .expect("send");
    assert_eq!(given.headers()["x-request-id"], "client-chosen-42");
    let generated = app.get("/nope").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
}

async fn unknown_routes_and_wrong_methods_are_problems(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    assert_problem(app.get("/no/such/route").await, 404, "not-found").await;
    let wrong = app
        .client
        .delete(app.url("/orders"))
        .send()
        .await
        .expect("send");
    assert_problem(wrong, 405, "method-not-allowed").await;
    let wrong = app
        .client
        .put(app.url("/idempotency-tokens"))
        .send()
        .await
        .expect("send");
    assert_problem(wrong, 405, "method-not-allowed").await;
}

async fn readiness_names_what_is_down(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    // The test app's broker URL points at a closed port.
    let body = assert_problem(app.get("/readyz").await, 503, "not-ready").await;
    let detail = body["detail"].as_str().expect("detail");
    assert!(detail.contains("rabbitmq"), "{detail}");
    assert!(
        !detail.contains("postgres") && !detail.contains("mysql") && !detail.contains("redis"),
        "{detail}"
    );
}

async fn metrics_expose_the_contract_names_from_the_start(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("text");
    for name in [
        "http_requests_total",
        "http_request_duration_seconds_bucket",
        "order_transitions_total",
        "order_end_to_end_seconds",
        "outbox_published_total",
        "outbox_publish_failures_total",
        "outbox_backlog",
        "outbox_oldest_unsent_seconds",
        "messages_consumed_total{result=\"dead_lettered\"}",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(text.contains("route=\"/healthz\""), "{text}");
}

async fn a_refusal_rewritten_as_a_problem_is_counted_under_its_matched_route(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    // Refused by the body reader with a bare 413, which the edge rewrites as problem+json.
    let body = format!("{{\"pad\": \"{}\"}}", "x".repeat(70 * 1024));
    let response = app.post_order_raw(Some(&token), body).await;
    assert_eq!(response.status(), 413);
    let text = app.get("/metrics").await.text().await.expect("text");
    let counted = r#"http_requests_total{method="POST",route="/orders",status="413"}"#;
    assert!(text.contains(counted), "{counted} missing from:\n{text}");
}

async fn the_openapi_document_and_swagger_ui_are_served(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let spec: Value = app.get("/openapi.json").await.json().await.expect("json");
    assert!(
        spec["openapi"]
            .as_str()
            .expect("version")
            .starts_with("3.1")
    );
    for path in [
        "/orders",
        "/orders/{order_id}",
        "/idempotency-tokens",
        "/readyz",
    ] {
        assert!(spec["paths"].get(path).is_some(), "{path} undocumented");
    }
    let docs = app.get("/docs/").await;
    assert_eq!(docs.status(), 200);
    assert!(docs.text().await.expect("html").contains("swagger"));
}
