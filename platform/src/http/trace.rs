//! W3C trace context (`traceparent`): taken from the request when present, otherwise
//! started here, and carried on into the AMQP headers of every event the request causes.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use rand::Rng;

pub const TRACEPARENT: &str = "traceparent";

/// One hop of a distributed trace: the trace all hops share and this hop's span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, shared by every hop of the trace.
    pub trace_id: String,
    /// 16 lowercase hex digits naming this hop.
    pub span_id: String,
}

impl TraceContext {
    /// Starts a new trace.
    pub fn new_root() -> Self {
        let mut rng = rand::rng();
        Self {
            trace_id: format!("{:032x}", rng.random::<u128>().max(1)),
            span_id: new_span_id(&mut rng),
        }
    }

    /// Continues the trace of a `traceparent` value with a new span; `None` if it is malformed.
    pub fn continue_from(traceparent: &str) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace_id, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        let valid = hex(version, 2)
            && version != "ff"
            && hex(trace_id, 32)
            && trace_id.bytes().any(|b| b != b'0')
            && hex(parent, 16)
            && hex(flags, 2);
        valid.then(|| Self {
            trace_id: trace_id.to_ascii_lowercase(),
            span_id: new_span_id(&mut rand::rng()),
        })
    }

    /// The context from a header value when it is valid, else a new root.
    pub fn from_header(value: Option<&str>) -> Self {
        value
            .and_then(Self::continue_from)
            .unwrap_or_else(Self::new_root)
    }

    /// The `traceparent` value naming this hop as the parent of the next.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

fn new_span_id(rng: &mut impl Rng) -> String {
    format!("{:016x}", rng.random::<u64>().max(1))
}

/// Handlers take the request's context (set by the edge middleware) as an argument.
impl<S: Send + Sync> FromRequestParts<S> for TraceContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<TraceContext>()
            .cloned()
            .unwrap_or_else(|| {
                Self::from_header(parts.headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()))
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_continued_with_a_new_span() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::continue_from(parent).expect("valid");
        assert_eq!(ctx.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(ctx.span_id, "00f067aa0ba902b7");
        assert!(
            ctx.traceparent()
                .starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")
        );
    }

    #[test]
    fn malformed_traceparents_start_a_new_trace() {
        for bad in [
            "",
            "00-xyz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::continue_from(bad).is_none(), "{bad}");
        }
        assert_eq!(TraceContext::new_root().trace_id.len(), 32);
    }
}
