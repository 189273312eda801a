//! The Redis connection: one multiplexed, self-reconnecting connection per process.

use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::tls::CaBundle;

/// `REDIS_TIMEOUT_MS`'s default. Redis answers in well under a millisecond here; on a
/// machine saturated by a load test, replies queued for a CPU were seen near 300 ms, so
/// 250 ms would call a busy Redis down. Half a second is paid once per outage (after one
/// timeout the callers stop asking, see [`crate::redis_health`]), not once per call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// [`connect_with_timeout`] with [`DEFAULT_TIMEOUT`] and the system's roots.
pub fn connect(url: &str) -> anyhow::Result<ConnectionManager> {
    connect_with_timeout(url, DEFAULT_TIMEOUT, None)
}

/// A lazily connected manager: the service starts even while Redis is down, and the
/// connection comes back by itself when Redis does. Connecting and every reply are bounded
/// by `timeout`, so a Redis that stops answering (a stopped process, a dead network path)
/// fails a call after `timeout` instead of hanging it.
///
/// A `rediss://` URL is verified against `ca` when given (it then replaces the system's
/// roots: a private CA is the only one a private Redis answers with), else the system's roots.
pub fn connect_with_timeout(
    url: &str,
    timeout: Duration,
    ca: Option<&CaBundle>,
) -> anyhow::Result<ConnectionManager> {
    let client = match ca {
        Some(ca) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.pem().as_bytes().to_vec()),
            },
        ),
        None => redis::Client::open(url),
    }
    .with_context(|| format!("REDIS_URL {url:?} is not valid"))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config)
        .context("creating the Redis connection manager")
}

/// `PING`, for readiness checks.
pub async fn ping(conn: &mut ConnectionManager) -> bool {
    redis::cmd("PING").query_async::<String>(conn).await.is_ok()
}
