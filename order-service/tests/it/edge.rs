//! The refusals every route shares: 401s carry a `Bearer` challenge, a saturated database
//! pool is 503 `busy` with `Retry-After` (`POST /orders` included), and clients past their
//! rate limit get 429.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use order_service::config::Config;
use testkit::TestDatabase;

use crate::helpers::{TestApp, assert_problem, eventually, order_body, random_uuid};

const ADMIN_TOKEN: &str = "test-admin-token";

#[tokio::test]
async fn every_401_carries_a_bearer_challenge_and_the_scheme_is_case_insensitive() {
    let app = TestApp::spawn().await;
    for (method, path) in [("GET", "/admin/outbox"), ("POST", "/admin/outbox/1/retry")] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        for credential in testkit::REFUSED_CREDENTIALS {
            let request = app.client.request(method.clone(), app.url(path));
            let (response, challenge) = testkit::send_with_credential(request, credential).await;
            assert!(
                challenge.starts_with("Bearer"),
                "{method} {path} with {credential:?}: {challenge:?}"
            );
            assert_problem(response, 401, "unauthorized").await;
        }
    }
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let response = app
            .client
            .get(app.url("/admin/outbox"))
            .header("Authorization", format!("{scheme} {ADMIN_TOKEN}"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "{scheme}");
    }
}

#[tokio::test]
async fn a_saturated_database_pool_answers_503_busy_with_retry_after() {
    testkit::init_logs();
    let database = TestDatabase::create("orders", &order_service::MIGRATOR).await;
    let mut config = Config::from_env().expect("the default configuration");
    config.database_urls = vec![database.url.clone()];
    config.database_max_connections = 1;
    config.redis_url = testkit::redis_url();
    config.redis_key_prefix = testkit::redis_prefix();
    config.amqp_urls = vec![testkit::NO_BROKER.into()];
    config.admin_token = Some(ADMIN_TOKEN.into());
    let mut state = order_service::build_state(config).await.expect("state");
    // One connection, which the test holds: every request waits out the acquire timeout.
    let (pool, held) = crate::helpers::saturated_pool(&database.url).await;
    state.db = pool.into();
    let app = order_service::build_app(state);
    let order = format!("/orders/{}", random_uuid());
    let cancel = format!("{order}/cancel");
    let requests = [
        ("GET", order.as_str()),
        ("GET", "/orders"),
        ("POST", cancel.as_str()),
        ("GET", "/admin/outbox"),
        ("POST", "/admin/outbox/1/retry"),
    ];
    for (method, uri) in requests {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(Body::empty())
            .expect("request");
        testkit::assert_busy(&app, request, &format!("{method} {uri}")).await;
    }
    drop(held);
    let request = Request::get(&order).body(Body::empty()).expect("request");
    assert_eq!(
        testkit::status_of(&app, request).await,
        404,
        "the pool was the only reason"
    );
}

/// `POST /orders` goes through the intake task, which only `serve` runs: checked over HTTP.
#[tokio::test]
async fn an_order_on_a_saturated_pool_is_503_busy_and_its_token_is_given_back() {
    let (app, held) = TestApp::spawn_saturated().await;
    let token = app.issue_token().await;
    let body = order_body(1, 1001, 1);
    let response = app.post_order(&token, &body).await;
    assert_eq!(response.headers()["retry-after"], "1");
    assert_problem(response, 503, "busy").await;
    assert_eq!(app.count("orders").await, 0);

    drop(held);
    // The service's loops share the one connection: a request may still find it taken.
    let response = eventually(Duration::from_secs(10), || async {
        let response = app.post_order(&token, &body).await;
        (response.status() != 503).then_some(response)
    })
    .await;
    assert_eq!(response.status(), 202, "the same token places the order");
    assert!(!response.headers().contains_key("idempotent-replayed"));
    assert_eq!(app.count("orders").await, 1);
}

#[tokio::test]
async fn past_its_burst_a_client_gets_429_with_retry_after() {
    let app = TestApp::spawn_with(|c| c.rate_limit = testkit::one_a_second_after(3)).await;
    let path = format!("/orders/{}", random_uuid());
    testkit::assert_limited_past_the_burst(3, 404, || app.get(&path)).await;
}

#[tokio::test]
async fn health_readiness_and_metrics_are_never_limited() {
    let app = TestApp::spawn_with(|c| c.rate_limit = testkit::one_a_second_after(1)).await;
    for _ in 0..10 {
        for path in ["/healthz", "/readyz", "/metrics"] {
            assert_ne!(app.get(path).await.status(), 429, "{path}");
        }
    }
    // The limit is on: the first other request spends the only token, the next is refused.
    let path = format!("/orders/{}", random_uuid());
    assert_eq!(app.get(&path).await.status(), 404);
    assert_eq!(app.get(&path).await.status(), 429);
}

#[tokio::test]
async fn rate_limits_are_off_by_default() {
    let app = TestApp::spawn().await;
    let path = format!("/orders/{}", random_uuid());
    for _ in 0..50 {
        assert_eq!(app.get(&path).await.status(), 404);
    }
}

#[tokio::test]
async fn with_a_pool_of_one_connection_the_intake_keeps_none_between_batches() {
    // The intake plans its statement once on a session of its own, kept from batch to batch
    // in a pool large enough to spare it; kept in a pool of one, it would leave every other
    // request waiting for the acquire timeout (503) after the first order.
    let app = TestApp::spawn_with(|c| c.database_max_connections = 1).await;
    for user in 1..=3 {
        let order = app.create_order(&order_body(user, 1, 1)).await;
        let id = order["order_id"].as_str().expect("order_id");
        let response = app.get(&format!("/orders/{id}")).await;
        assert_eq!(response.status(), 200, "GET after order {user}");
    }
}
