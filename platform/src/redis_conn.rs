//! The Redis connection: one multiplexed, self-reconnecting connection per process.

use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A lazily connected manager: the service starts even while Redis is down, each command
/// fails fast (instead of hanging) while it stays down, and the connection comes back by
/// itself when Redis does.
pub fn connect(url: &str) -> anyhow::Result<ConnectionManager> {
    let client =
        redis::Client::open(url).with_context(|| format!("REDIS_URL {url:?} is not valid"))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_secs(2)))
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
