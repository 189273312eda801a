//! The refusals every route shares: a saturated database pool is 503 `busy` with
//! `Retry-After`, and clients past their rate limit get 429 `rate-limited`.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use inventory_service::Config;
use platform::http::RateLimit;
use sqlx::postgres::PgPoolOptions;
use testkit::{TestDatabase, redis_prefix, redis_url};
use tower::ServiceExt;

use crate::helpers::{TestApp, assert_problem};

#[tokio::test]
async fn a_saturated_database_pool_answers_503_busy_with_retry_after() {
    let database = TestDatabase::create("inventory", &inventory_service::MIGRATOR).await;
    let config = Config {
        database_urls: vec![database.url.clone()],
        database_max_connections: 1,
        redis_url: redis_url(),
        redis_key_prefix: redis_prefix(),
        amqp_urls: vec!["amqp://guest:guest@127.0.0.1:1/%2f".into()],
        ..Config::default()
    };
    let mut state = inventory_service::build_state(config).await.expect("state");
    // One connection, which the test holds: every request must wait for the acquire timeout.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&database.url)
        .await
        .expect("pool");
    state.db = pool.clone();
    let held = pool.acquire().await.expect("the only connection");
    let app = inventory_service::build_app(state);
    for uri in [
        "/products/1",
        "/products",
        "/reservations/0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80",
    ] {
        let response = app
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), 503, "{uri}");
        assert_eq!(response.headers()["retry-after"], "1", "{uri}");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("body");
        let problem: shared::Problem = serde_json::from_slice(&body).expect("problem");
        assert_eq!(problem.slug(), "busy", "{uri}");
    }
    drop(held);
    let response = app
        .oneshot(
            Request::get("/products/1")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(response.status(), 404, "the pool was the only reason");
}

#[tokio::test]
async fn past_its_burst_a_client_gets_429_with_retry_after() {
    let app = TestApp::spawn_with(|c| {
        c.rate_limit = RateLimit {
            per_sec: 1,
            burst: 3,
        }
    })
    .await;
    for _ in 0..3 {
        let response = app
            .anonymous
            .get(app.url("/products"))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 200);
    }
    let response = app
        .anonymous
        .get(app.url("/products"))
        .send()
        .await
        .expect("GET");
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!(retry_after >= 1);
    assert_problem(response, 429, "rate-limited").await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = app.anonymous.get(app.url(path)).send().await.expect("GET");
        assert_ne!(response.status(), 429, "{path}");
    }
}
