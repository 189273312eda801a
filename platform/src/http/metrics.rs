//! The HTTP metrics (requests by method, matched route and status, and their latency) and
//! `/metrics`, which renders the process-wide recorder of [`crate::telemetry::metrics`].

use std::time::Instant;

use crate::telemetry::metrics::handle;
use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub const HTTP_REQUESTS_TOTAL: &str = "http_requests_total";
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "http_request_duration_seconds";

/// Describes the HTTP metrics and exposes them at zero (once, with the first router built).
pub(super) fn describe_http() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(describe);
}

fn describe() {
    handle();
    metrics::describe_counter!(
        HTTP_REQUESTS_TOTAL,
        "HTTP requests answered, by method, matched route and status"
    );
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "HTTP request latency, by method, matched route and status"
    );
    let labels = [("method", "GET"), ("route", "/healthz"), ("status", "200")];
    metrics::counter!(HTTP_REQUESTS_TOTAL, &labels).absolute(0);
    let _ = metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, &labels);
}

/// `GET /metrics`.
pub async fn render() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle().render(),
    )
        .into_response()
}

/// The matched route, carried from inside the router to the outer metrics middleware.
#[derive(Debug, Clone)]
struct RouteLabel(String);

/// Route layer: records which route matched (only known inside the router).
pub async fn remember_route(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let mut response = next.run(request).await;
    if let Some(route) = route {
        response.extensions_mut().insert(RouteLabel(route));
    }
    response
}

/// Outer layer: counts, times and logs (see [`super::access_log`]) every request, including
/// 404s that matched no route.
pub async fn record(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let request_id = request
        .headers()
        .get(super::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let latency = started.elapsed();
    let route = response
        .extensions()
        .get::<RouteLabel>()
        .map_or_else(|| "unmatched".to_owned(), |r| r.0.clone());
    let status = response.status().as_u16();
    super::access_log::record(&method, &route, status, latency, &request_id);
    let labels = [
        ("method", method),
        ("route", route),
        ("status", status.to_string()),
    ];
    metrics::counter!(HTTP_REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, &labels).record(latency.as_secs_f64());
    response
}
