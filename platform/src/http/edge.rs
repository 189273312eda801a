//! Wraps a service's router with the edge every request passes through.
//!
//! Outermost first: set `x-request-id` (kept from the client or generated) -> trace context
//! -> tracing span -> metrics -> problem+json for any bare error -> timeout -> echo the
//! request id. 404 and 405 answers, body limits and timeouts are all problem+json too.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::metrics;
use super::trace::{TRACEPARENT, TraceContext};

/// Request bodies above this are refused with 413.
pub const BODY_LIMIT_BYTES: usize = 64 * 1024;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Adds fallbacks and the shared middleware stack to a fully routed service.
pub fn with_edge(router: Router, request_timeout: Duration) -> Router {
    router
        .route_layer(middleware::from_fn(metrics::remember_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(middleware::from_fn(trace_context))
                .layer(TraceLayer::new_for_http().make_span_with(make_span))
                .layer(middleware::from_fn(metrics::record))
                .layer(middleware::from_fn(problem_for_bare_errors))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    request_timeout,
                ))
                .layer(PropagateRequestIdLayer::new(REQUEST_ID)),
        )
}

async fn not_found(request: Request) -> Problem {
    Problem::not_found(format!("no route for {}", request.uri().path()))
}

async fn method_not_allowed(request: Request) -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn trace_context(mut request: Request, next: Next) -> Response {
    let context = TraceContext::from_header(
        request
            .headers()
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok()),
    );
    request.extensions_mut().insert(context);
    next.run(request).await
}

fn make_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let trace_id = request
        .extensions()
        .get::<TraceContext>()
        .map(|c| c.trace_id.as_str())
        .unwrap_or_default();
    tracing::info_span!(
        "http",
        method = %request.method(),
        path = %request.uri().path(),
        request_id,
        trace_id,
    )
}

/// Anything that answers 4xx/5xx without a problem body (axum's own rejections, the
/// timeout layer) is rewritten to problem+json, so clients can rely on one error shape.
async fn problem_for_bare_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes()
                .starts_with(shared::problem::CONTENT_TYPE.as_bytes())
        });
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let problem = problem_for_status(status);
    let mut rewritten = problem.into_response();
    // Keep headers such as `Allow` and `Retry-After`, but not the old body's type and length.
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(shared::problem::CONTENT_TYPE),
    );
    std::mem::swap(rewritten.headers_mut(), &mut parts.headers);
    rewritten
}

fn problem_for_status(status: StatusCode) -> Problem {
    let (slug, title, detail) = match status.as_u16() {
        400 => (
            "bad-request",
            "Bad request",
            "the request could not be understood",
        ),
        404 => ("not-found", "Not found", "no such resource"),
        405 => (
            "method-not-allowed",
            "Method not allowed",
            "this method is not allowed here",
        ),
        413 => (
            "payload-too-large",
            "Payload too large",
            "request bodies are limited to 64 KiB",
        ),
        415 => (
            "unsupported-media-type",
            "Unsupported media type",
            "send application/json",
        ),
        429 => (
            "rate-limited",
            "Too many requests",
            "slow down and retry later",
        ),
        503 => (
            "not-ready",
            "Service unavailable",
            "the request could not be completed in time",
        ),
        s if s >= 500 => return Problem::internal(),
        _ => ("bad-request", "Bad request", "the request was refused"),
    };
    Problem::new(status, slug, title, detail)
}
