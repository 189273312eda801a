//! Tests that read the values of the service's metrics. The metrics recorder is process-wide,
//! so these live in their own test binary (their own process) and take turns: a value read
//! here counts this test's work and nothing else.

#[allow(dead_code, unused_imports)]
#[path = "../it/helpers.rs"]
mod helpers;

use testkit::scrape_metric;
use tokio::sync::Mutex;

use helpers::{TestApp, assert_exactly_fifty_applied, patient, stampede};

/// Held by each test for its whole run.
static TURN: Mutex<()> = Mutex::const_new(());

#[tokio::test]
async fn a_deduction_counts_one_lock_acquisition() {
    let _turn = TURN.lock().await;
    let app = TestApp::spawn().await;
    app.create_product(1, 1).await;
    let acquired = r#"lock_acquisitions_total{result="acquired",backend="redis"}"#;
    let before = scrape_metric(&app.url(""), acquired).await;
    assert_eq!(app.deduct("d", &[(1, 1)]).await.status(), 200);
    assert_eq!(scrape_metric(&app.url(""), acquired).await, before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_redis_unreachable_deductions_go_on_without_the_lock_and_still_apply_exactly_fifty() {
    let _turn = TURN.lock().await;
    let app = TestApp::spawn_with(|c| {
        patient(c);
        c.redis_url = "redis://127.0.0.1:1/0".to_owned();
    })
    .await;
    app.create_product(1, 50).await;
    let bypassed = r#"lock_acquisitions_total{result="bypassed",backend="redis"}"#;
    let before = scrape_metric(&app.url(""), bypassed).await;
    let batches_before = app.deductions.stats().batches;

    let statuses = stampede(&app, 1, 200).await;

    assert_exactly_fifty_applied(&app, 1, &statuses).await;
    // The lock is taken once per batch, not once per request; with nobody else writing the
    // product, no batch retries, so every batch bypassed the lock exactly once.
    let batches = app.deductions.stats().batches - batches_before;
    assert!((1..=200).contains(&batches), "{batches} batches");
    assert_eq!(
        scrape_metric(&app.url(""), bypassed).await,
        before + batches as f64,
        "every batch was counted as bypassed"
    );
    let ready = app
        .anonymous
        .get(app.url("/readyz"))
        .send()
        .await
        .expect("GET /readyz");
    let problem = helpers::assert_problem(ready, 503, "not-ready").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("redis"),
        "{problem}"
    );
}

#[tokio::test]
async fn every_hold_transition_and_refusal_is_counted_once() {
    let _turn = TURN.lock().await;
    let app =
        TestApp::spawn_with(|c| c.hold_expiry_interval = std::time::Duration::from_millis(100))
            .await;
    app.create_product(1, 10).await;
    let base = app.url("");
    let series = [
        r#"hold_transitions_total{to="HELD"}"#,
        r#"hold_transitions_total{to="CONFIRMED"}"#,
        r#"hold_transitions_total{to="CANCELLED"}"#,
        r#"hold_transitions_total{to="EXPIRED"}"#,
        r#"holds_refused_total{reason="insufficient_stock"}"#,
        r#"holds_refused_total{reason="cancelled"}"#,
    ];
    let mut before = Vec::new();
    for name in series {
        before.push(scrape_metric(&base, name).await);
    }
    let post = |path: String, body: serde_json::Value| {
        let request = app.admin.post(app.url(&path)).json(&body);
        async move { request.send().await.expect("a request").status().as_u16() }
    };
    let hold = |id: &str, quantity: i64, ttl: i64| serde_json::json!({"hold_id": id, "items": [{"product_id": 1, "quantity": quantity}], "ttl_secs": ttl});
    assert_eq!(post("/holds".into(), hold("a", 1, 600)).await, 201);
    assert_eq!(
        post("/holds".into(), hold("a", 1, 600)).await,
        201,
        "a replay counts nothing"
    );
    assert_eq!(
        post("/holds/a/confirm".into(), serde_json::json!({})).await,
        200
    );
    assert_eq!(
        post("/holds/a/confirm".into(), serde_json::json!({})).await,
        200
    );
    assert_eq!(post("/holds".into(), hold("b", 1, 600)).await, 201);
    assert_eq!(
        post("/holds/b/cancel".into(), serde_json::json!({})).await,
        200
    );
    assert_eq!(
        post("/holds/b/cancel".into(), serde_json::json!({})).await,
        200
    );
    assert_eq!(post("/holds".into(), hold("c", 100, 600)).await, 409);
    assert_eq!(
        post("/holds/d/cancel".into(), serde_json::json!({})).await,
        200
    );
    assert_eq!(post("/holds".into(), hold("d", 1, 600)).await, 409);
    assert_eq!(post("/holds".into(), hold("e", 1, 1)).await, 201);
    testkit::eventually(std::time::Duration::from_secs(15), || async {
        let expired = scrape_metric(&base, series[3]).await;
        (expired > before[3]).then_some(())
    })
    .await;
    // HELD: a, b, e; CONFIRMED: a; CANCELLED: b and the tombstone d; EXPIRED: e.
    let expected = [3.0, 1.0, 2.0, 1.0, 1.0, 1.0];
    for ((name, was), added) in series.iter().zip(before).zip(expected) {
        assert_eq!(scrape_metric(&base, name).await, was + added, "{name}");
    }
    assert_eq!(scrape_metric(&base, "holds_overdue").await, 0.0);
}
