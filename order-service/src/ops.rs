//! Operations routes: liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::response::Response;

use crate::state::AppState;

/// Liveness: 200 while the process runs
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> Response {
    platform::http::health::healthz().await
}

/// Readiness: 200 only when PostgreSQL, Redis and RabbitMQ answer and no shutdown has begun
#[utoipa::path(
    get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready"),
        (status = 503, description = "A dependency is down (`detail` names it) or the service is shutting down", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    state.readiness.respond().await
}

/// Prometheus metrics
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics() -> Response {
    platform::http::metrics::render().await
}
