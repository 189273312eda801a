//! The trace context of each request ([`TraceContext`], from the client's `traceparent`):
//! the parent of the request's span, and what handlers hand on to the events they write.

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::telemetry::TraceContext;

/// The remote context of a request, kept for handlers when spans have no context of their own.
#[derive(Debug, Clone)]
struct Remote(TraceContext);

struct RequestHeaders<'a>(&'a axum::http::HeaderMap);

impl Extractor for RequestHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Middleware outside the request's span: reads the client's context.
pub(super) async fn read_context(mut request: Request, next: Next) -> Response {
    let remote = TraceContext::extract(&RequestHeaders(request.headers()));
    request.extensions_mut().insert(Remote(remote));
    next.run(request).await
}

/// The request's span (a server span in OpenTelemetry), child of the client's context.
pub(super) fn request_span(request: &Request) -> Span {
    let request_id = request
        .headers()
        .get(super::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "http",
        otel.name = %request.method(),
        otel.kind = "server",
        method = %request.method(),
        path = %request.uri().path(),
        request_id,
        trace_id = tracing::field::Empty,
    );
    let remote = request
        .extensions()
        .get::<Remote>()
        .map(|r| r.0.clone())
        .unwrap_or_default();
    let context = remote.parent_of(&span);
    span.record("trace_id", context.trace_id().as_str());
    span
}

/// Handlers take the context of the request's span as an argument, to hand on to the events
/// they write.
impl<S: Send + Sync> FromRequestParts<S> for TraceContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let own = Span::current().context();
        if own.span().span_context().is_valid() {
            return Ok(Self::from_context(own));
        }
        Ok(parts
            .extensions
            .get::<Remote>()
            .map(|r| r.0.clone())
            .unwrap_or_else(|| TraceContext::extract(&RequestHeaders(&parts.headers))))
    }
}
