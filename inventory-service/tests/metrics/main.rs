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
    let acquired = r#"lock_acquisitions_total{result="acquired"}"#;
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
    let bypassed = r#"lock_acquisitions_total{result="bypassed"}"#;
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
