//! W3C trace context (`traceparent`, `tracestate`) through OpenTelemetry's standard
//! propagator: read from each request and each consumed message into the parent of its span,
//! and written into the AMQP headers of every event that span causes, so one trace follows an
//! order through both services.

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// The trace context a span passes on: what an event it causes carries to its consumer.
#[derive(Debug, Clone, Default)]
pub struct TraceContext(opentelemetry::Context);

impl TraceContext {
    /// The context of a span that has one of its own.
    pub(crate) fn from_context(context: opentelemetry::Context) -> Self {
        Self(context)
    }

    /// No trace yet: an event written with it starts a new trace when it is published.
    pub fn new_root() -> Self {
        Self::default()
    }

    /// The context `carrier` (request or message headers) names; empty when it names none or
    /// a malformed one.
    pub fn extract(carrier: &dyn Extractor) -> Self {
        Self(TraceContextPropagator::new().extract(carrier))
    }

    /// Makes `self` (a remote context) the parent of `span`, and returns what `span` passes
    /// on. Without the OpenTelemetry layer (a test's own subscriber) the span has no
    /// context of its own, and the remote one is passed on unchanged.
    pub fn parent_of(self, span: &Span) -> Self {
        let _ = span.set_parent(self.0.clone());
        let own = span.context();
        if own.span().span_context().is_valid() {
            Self(own)
        } else {
            self
        }
    }

    /// The 32 hex digits of the trace, empty when there is none.
    pub fn trace_id(&self) -> String {
        let span = self.0.span();
        let context = span.span_context();
        if context.is_valid() {
            context.trace_id().to_string()
        } else {
            String::new()
        }
    }

    /// `traceparent` (and `tracestate` when not empty), as headers to send on.
    pub fn headers(&self) -> HashMap<String, String> {
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(&self.0, &mut headers);
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carrier(traceparent: &str) -> HashMap<String, String> {
        HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())])
    }

    #[test]
    fn a_valid_traceparent_is_passed_on_with_its_trace() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::extract(&carrier(parent));
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.headers()[TRACEPARENT], parent);
    }

    #[test]
    fn malformed_traceparents_carry_no_trace() {
        for bad in [
            "",
            "00-xyz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let context = TraceContext::extract(&carrier(bad));
            assert_eq!(context.trace_id(), "", "{bad}");
            assert!(context.headers().is_empty(), "{bad}");
        }
    }
}
