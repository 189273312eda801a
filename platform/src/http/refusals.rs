//! Every refusal in one shape: whatever answered 4xx/5xx without a problem body becomes
//! problem+json, with the challenge and `Retry-After` clients rely on.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shared::Problem;

use super::RETRY_AFTER_SECS;

/// Every refusal looks the same whoever produced it: anything that answers 4xx/5xx without
/// a problem body (axum's own rejections, the timeout layer) is rewritten to problem+json,
/// every 401 carries a `WWW-Authenticate` challenge (RFC 9110 §15.5.2) and every 503 a
/// `Retry-After`, so clients can rely on one shape.
pub(super) async fn uniform_refusals(request: Request, next: Next) -> Response {
    let mut response = problem_for_bare_errors(next.run(request).await);
    let status = response.status();
    let headers = response.headers_mut();
    match status {
        StatusCode::UNAUTHORIZED if !headers.contains_key(header::WWW_AUTHENTICATE) => {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        StatusCode::SERVICE_UNAVAILABLE if !headers.contains_key(header::RETRY_AFTER) => {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        _ => {}
    }
    response
}

fn problem_for_bare_errors(response: Response) -> Response {
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
    // And its extensions: the matched route the metrics and the access log read is one.
    *rewritten.extensions_mut() = parts.extensions;
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

/// 429 `rate-limited`, with `Retry-After` the time until the client is let in again.
pub(super) fn too_many_requests(wait: Duration) -> Response {
    // Whole seconds (RFC 9110 §10.2.3), rounded up so a client that waits is let in.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many requests",
        format!(
            "this client exceeded its request rate; retry in {} s",
            secs.max(1)
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}
