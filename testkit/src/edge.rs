//! The busy refusal both services share, checked on the router itself: a saturated database
//! pool answers 503 `busy` with `Retry-After`.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres};
use tower::ServiceExt;

/// A pool of one connection to `url` that gives up waiting for it after 200 ms, and that
/// connection, held: every request on the pool waits out the acquire timeout until it drops.
pub async fn saturated_pool(url: &str) -> (PgPool, PoolConnection<Postgres>) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect(url)
        .await
        .expect("pool");
    let held = pool.acquire().await.expect("the only connection");
    (pool, held)
}

/// Sends `request` to `app` and asserts the 503 `busy` problem with `Retry-After: 1`; `what`
/// names the request in a failure.
pub async fn assert_busy(app: &axum::Router, request: Request<Body>, what: &str) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), 503, "{what}");
    assert_eq!(response.headers()["retry-after"], "1", "{what}");
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("body");
    let problem: shared::Problem = serde_json::from_slice(&body).expect("problem");
    assert_eq!(problem.slug(), "busy", "{what}");
}

/// Sends `request` to `app`; its status.
pub async fn status_of(app: &axum::Router, request: Request<Body>) -> u16 {
    let response = app.clone().oneshot(request).await.expect("infallible");
    response.status().as_u16()
}
