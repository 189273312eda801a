//! Wraps a service's router with the edge every request passes through.
//!
//! Outermost first: set `x-request-id` (kept from the client or generated) and echo it ->
//! trace context -> tracing span -> metrics -> CORS (when configured; preflights end here) ->
//! uniform refusals (problem+json for any bare
//! error, `WWW-Authenticate` on every 401, `Retry-After` on every 503) -> rate limit ->
//! panics as 500 -> timeout. 404 and 405 answers, body limits and timeouts are all
//! problem+json too.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::IntoResponse;
use shared::Problem;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::REQUEST_ID;
use super::cors::Cors;
use super::metrics;
use super::rate_limit::{self, Limiter, RateLimit};
use super::refusals::uniform_refusals;
use super::trace;

/// Request bodies above this are refused with 413.
pub const BODY_LIMIT_BYTES: usize = 64 * 1024;

/// Adds fallbacks and the shared middleware stack to a fully routed service. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()` so rate limits see each client.
pub fn with_edge(
    router: Router,
    request_timeout: Duration,
    rate_limit: RateLimit,
    cors: &Cors,
) -> Router {
    metrics::describe_http();
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
                .layer(middleware::from_fn(trace::read_context))
                .layer(TraceLayer::new_for_http().make_span_with(trace::request_span))
                .layer(middleware::from_fn(metrics::record))
                // Outside the refusals, so a browser can read a 401, 429 or 503 too; inside
                // the request id, so a preflight carries one like every other answer.
                .option_layer(cors.layer())
                .layer(middleware::from_fn(uniform_refusals))
                .layer(middleware::from_fn_with_state(
                    Limiter::new(rate_limit),
                    rate_limit::limit,
                ))
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::header;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    async fn boom() -> &'static str {
        panic!("a bug in a handler")
    }

    async fn refused(status: u16) -> StatusCode {
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
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
                RateLimit::default(),
                &Cors::default(),
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

    #[tokio::test]
    async fn every_401_challenges_and_every_503_says_when_to_retry() {
        let app = || {
            with_edge(
                Router::new()
                    .route("/401", get(|| refused(401)))
                    .route("/503", get(|| refused(503))),
                Duration::from_secs(5),
                RateLimit::default(),
                &Cors::default(),
            )
        };
        let response = app()
            .oneshot(
                axum::http::Request::get("/401")
                    .body(Body::empty())
                    .unwrap_or_default(),
            )
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let response = app()
            .oneshot(
                axum::http::Request::get("/503")
                    .body(Body::empty())
                    .unwrap_or_default(),
            )
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[tokio::test]
    async fn past_the_burst_a_client_is_refused_but_probes_are_not() {
        let app = with_edge(
            Router::new()
                .route("/work", get(|| async { "done" }))
                .route("/healthz", get(|| async { "ok" })),
            Duration::from_secs(5),
            RateLimit {
                per_sec: 1,
                burst: 2,
            },
            &Cors::default(),
        );
        let mut statuses = Vec::new();
        for uri in [
            "/work", "/work", "/work", "/healthz", "/healthz", "/healthz",
        ] {
            let (status, _, _) = answer(app.clone(), "GET", uri).await;
            statuses.push(status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 429, 200, 200, 200]);
    }
}
