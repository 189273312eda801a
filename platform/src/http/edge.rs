//! Wraps a service's router with the edge every request passes through.
//!
//! Outermost first: set `x-request-id` (kept from the client or generated) and echo it ->
//! trace context -> tracing span -> metrics -> problem+json for any bare error -> panics as
//! 500 -> timeout. 404 and 405 answers, body limits and timeouts are all problem+json too.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
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
                // Right inside the layer that sets it, so every answer carries the id, even
                // one a later layer produced (a timeout, a caught panic).
                .layer(PropagateRequestIdLayer::new(REQUEST_ID))
                .layer(middleware::from_fn(trace_context))
                .layer(TraceLayer::new_for_http().make_span_with(make_span))
                .layer(middleware::from_fn(metrics::record))
                .layer(middleware::from_fn(problem_for_bare_errors))
                // A panicking handler answers 500 problem+json instead of dropping the connection.
                .layer(CatchPanicLayer::custom(|_| {
                    Problem::internal().into_response()
                }))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    request_timeout,
                )),
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    async fn boom() -> &'static str {
        panic!("a bug in a handler")
    }

    async fn answer(router: Router, method: &str, uri: &str) -> (StatusCode, String, Vec<u8>) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap_or_default();
        let response = router.oneshot(request).await.unwrap_or_else(|e| match e {});
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            response.headers().contains_key(&REQUEST_ID),
            "request id on {uri}"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, content_type, body.to_vec())
    }

    #[tokio::test]
    async fn panics_unknown_routes_and_wrong_methods_are_problems_with_a_request_id() {
        let app = || {
            with_edge(
                Router::new().route("/boom", get(boom)),
                Duration::from_secs(5),
            )
        };
        for (method, uri, status) in [
            ("GET", "/boom", 500),
            ("GET", "/nowhere", 404),
            ("DELETE", "/boom", 405),
        ] {
            let (got, content_type, body) = answer(app(), method, uri).await;
            assert_eq!(got.as_u16(), status, "{method} {uri}");
            assert_eq!(content_type, shared::problem::CONTENT_TYPE);
            let problem: Problem =
                serde_json::from_slice(&body).unwrap_or_else(|_| Problem::internal());
            assert_eq!(problem.status, status);
            assert!(
                !String::from_utf8_lossy(&body).contains("a bug in a handler"),
                "no internals leak"
            );
        }
    }
}
