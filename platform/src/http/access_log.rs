//! The access log: one line per answered request under its own target, `access`, at `info`
//! (`RUST_LOG=info,access=off` silences it alone). With `LOG_FORMAT=json` each line is one
//! JSON object whose fields are below.

use std::time::Duration;

/// The tracing target of access log lines.
pub const TARGET: &str = "access";

/// Writes the line of one request: `method`, matched `route` (`unmatched` when none matched),
/// `status`, `latency_ms` and `request_id`.
pub(super) fn record(method: &str, route: &str, status: u16, latency: Duration, request_id: &str) {
    tracing::info!(
        target: TARGET,
        method,
        route,
        status,
        latency_ms = latency.as_secs_f64() * 1000.0,
        request_id,
        "request answered"
    );
}
