//! `GET /healthz`, `GET /readyz`, `GET /metrics`.

use axum::extract::State;
use axum::response::Response;

use crate::state::AppState;

/// Liveness: 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process runs", body = Object, example = json!({"status": "ok"}))))]
pub async fn healthz() -> Response {
    platform::http::health::healthz().await
}

/// Readiness: 200 only while PostgreSQL, Redis and RabbitMQ all answer and no shutdown has begun.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Every backing system answers", body = Object, example = json!({"status": "ready"})),
        (status = 503, description = "Some backing system is down (`detail` names it: `postgres`, `redis`, `rabbitmq`) or the service is shutting down (`detail`: `shutting down`)",
            body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    state.readiness.respond().await
}

/// Prometheus metrics, text format.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain")))]
pub async fn metrics() -> Response {
    platform::http::metrics::render().await
}
