//! The refusals every route shares: a saturated database pool is 503 `busy` with
//! `Retry-After`, and clients past their rate limit get 429 `rate-limited`.

use axum::body::Body;
use axum::http::Request;
use inventory_service::Config;
use testkit::{Backend, NO_BROKER, TestDatabase, redis_prefix, redis_url};

use crate::helpers::TestApp;

testkit::on_each_backend!(
    past_its_burst_a_client_gets_429_with_retry_after,
    with_a_pool_of_one_connection_no_deductions_leader_keeps_a_session,
);

#[tokio::test]
async fn a_saturated_database_pool_answers_503_busy_with_retry_after() {
    let database = TestDatabase::create("inventory", &inventory_service::MIGRATOR).await;
    let config = Config {
        database_urls: vec![database.url.clone()],
        database_max_connections: 1,
        redis_url: redis_url(),
        redis_key_prefix: redis_prefix(),
        amqp_urls: vec![NO_BROKER.into()],
        ..Config::default()
    };
    let mut state = inventory_service::build_state(config).await.expect("state");
    // One connection, which the test holds: every request must wait for the acquire timeout.
    let (pool, held) = testkit::saturated_pool(&database.url).await;
    state.db = pool.into();
    let app = inventory_service::build_app(state);
    let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("request");
    for uri in [
        "/products/1",
        "/products",
        "/reservations/0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80",
    ] {
        testkit::assert_busy(&app, get(uri), uri).await;
    }
    drop(held);
    assert_eq!(
        testkit::status_of(&app, get("/products/1")).await,
        404,
        "the pool was the only reason"
    );
}

async fn past_its_burst_a_client_gets_429_with_retry_after(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| c.rate_limit = testkit::one_a_second_after(3)).await;
    testkit::assert_limited_past_the_burst(3, 200, || app.get("/products")).await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = app.anonymous.get(app.url(path)).send().await.expect("GET");
        assert_ne!(response.status(), 429, "{path}");
    }
}

async fn with_a_pool_of_one_connection_no_deductions_leader_keeps_a_session(backend: Backend) {
    // A leader's session plans its statements once and may be kept for the next leader in a
    // pool large enough to spare it; kept in a pool of one, it would leave every other request
    // waiting for the acquire timeout (503) after the first deduction.
    let app = TestApp::spawn_on(backend, |c| c.database_max_connections = 1).await;
    app.create_product(1, 10).await;
    for n in 1..=3 {
        let response = app.deduct(&format!("order-{n}"), &[(1, 1)]).await;
        assert_eq!(response.status(), 200, "deduction {n}");
        let product = app.get("/products/1").await;
        assert_eq!(product.status(), 200, "GET after deduction {n}");
    }
    assert_eq!(app.stock(1).await, 7);
}
