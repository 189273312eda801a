//! The Redis connection: one multiplexed, self-reconnecting connection per process, to the
//! server of `REDIS_URL`, to the primary that Redis Sentinel names ([`Sentinels`]), or to
//! the masters of a Redis Cluster ([`RedisCluster`]).
//!
//! Both are one type, [`RedisConnection`]: a [`ConnectionManager`] to the current primary,
//! plus, with Sentinels, a way to find the next one. A call that finds its primary gone (it
//! did not answer) or demoted (a write answered `READONLY`) makes the connection ask the
//! Sentinels again, in the background; once they name another node, every later call goes
//! there. Without Sentinels the primary never changes and the manager's own reconnecting is
//! all there is. On a cluster, redis-rs's cluster connection routes each call by its keys'
//! slot and follows failovers itself; callers cut multi-key calls by
//! [`RedisConnection::slot_groups`].

mod answers;
mod cluster;
pub mod health;
mod sentinels;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use redis::RedisResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelClient;

use answers::primary_lost;
pub use cluster::{
    DEFAULT_WAIT as DEFAULT_CLUSTER_WAIT, RedisCluster, connect_cluster, key_prefix_from_env, slot,
};
pub use sentinels::Sentinels;

use crate::storage::tls::CaBundle;

/// `REDIS_TIMEOUT_MS`'s default. Redis answers in well under a millisecond here; on a
/// machine saturated by a load test, replies queued for a CPU were seen near 300 ms, so
/// 250 ms would call a busy Redis down. Half a second is paid once per outage (after one
/// timeout the callers stop asking, see [`crate::storage::redis::health`]), not once per call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// Least time between two questions to the Sentinels: a burst of failed calls during a
/// failover asks a few times a second, not once per call.
const LOOKUP_PAUSE: Duration = Duration::from_millis(200);

/// [`connect_with_timeout`] to `REDIS_URL`'s server, with [`DEFAULT_TIMEOUT`] and the
/// system's roots.
pub fn connect(url: &str) -> anyhow::Result<RedisConnection> {
    connect_with_timeout(url, None, DEFAULT_TIMEOUT, None)
}

/// A lazily connected connection: the service starts even while Redis (or every Sentinel)
/// is down, and the connection comes back by itself when Redis does. Connecting and every
/// reply are bounded by `timeout`, so a Redis that stops answering (a stopped process, a dead
/// network path) fails a call after `timeout` instead of hanging it.
///
/// With `sentinels`, the primary is whichever node they name, and `url` supplies only how to
/// talk to it (see [`Sentinels`]). A `rediss://` URL is verified against `ca` when given (it
/// then replaces the system's roots: a private CA is the only one a private Redis answers
/// with), else the system's roots.
pub fn connect_with_timeout(
    url: &str,
    sentinels: Option<&Sentinels>,
    timeout: Duration,
    ca: Option<&CaBundle>,
) -> anyhow::Result<RedisConnection> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500));
    let client = client(url, ca)?;
    let db = client.get_connection_info().redis_settings().db();
    let connection = match sentinels {
        None => {
            let primary = Primary::new(client, config.clone())?;
            RedisConnection::new(Some(primary), None, config, db)
        }
        Some(sentinels) => {
            let finder = PrimaryFinder {
                sentinels: tokio::sync::Mutex::new(sentinels.client(url, ca)?),
                // Each Sentinel, and then the node it names, may take a connect and a reply.
                patience: timeout * 4 * u32::try_from(sentinels.addresses.len()).unwrap_or(1),
                asking: AtomicBool::new(false),
            };
            let connection = RedisConnection::new(None, Some(finder), config, db);
            connection.find_primary();
            connection
        }
    };
    Ok(connection)
}

fn client(url: &str, ca: Option<&CaBundle>) -> anyhow::Result<redis::Client> {
    match ca {
        Some(ca) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.pem().as_bytes().to_vec()),
            },
        ),
        None => redis::Client::open(url),
    }
    .with_context(|| format!("REDIS_URL {url:?} is not valid"))
}

/// `PING`, for readiness checks.
pub async fn ping(conn: &mut RedisConnection) -> bool {
    conn.ping().await.is_ok()
}

/// The process's Redis connection; cheap to clone (every clone shares one connection).
/// Commands go through it as through any `redis::aio` connection.
#[derive(Clone)]
pub struct RedisConnection {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where commands go; `None` until the Sentinels first named a primary.
    primary: RwLock<Option<Primary>>,
    /// `None`: the primary is `REDIS_URL`'s server, for good.
    finder: Option<PrimaryFinder>,
    /// Set on a Redis Cluster: every command goes through it, and `primary` stays `None`.
    cluster: Option<ClusterConnection>,
    config: ConnectionManagerConfig,
    /// `REDIS_URL`'s database number, whichever node is the primary.
    db: i64,
}

#[derive(Clone)]
struct Primary {
    /// `host:port`, to tell whether the Sentinels named another node, and for logs.
    address: String,
    conn: ConnectionManager,
}

impl Primary {
    fn new(client: redis::Client, config: ConnectionManagerConfig) -> anyhow::Result<Self> {
        let address = client.get_connection_info().addr().to_string();
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .context("creating the Redis connection manager")?;
        Ok(Self { address, conn })
    }
}

struct PrimaryFinder {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// How long one round of questions may take before it counts as failed.
    patience: Duration,
    /// Set while a round runs (and for [`LOOKUP_PAUSE`] after it), so concurrent failures
    /// ask once.
    asking: AtomicBool,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("primary", &self.primary().map(|p| p.address))
            .field("sentinel", &self.inner.finder.is_some())
            .field("cluster", &self.is_cluster())
            .finish()
    }
}

impl RedisConnection {
    fn new(
        primary: Option<Primary>,
        finder: Option<PrimaryFinder>,
        config: ConnectionManagerConfig,
        db: i64,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                primary: RwLock::new(primary),
                finder,
                cluster: None,
                config,
                db,
            }),
        }
    }

    /// Whether this is a Redis Cluster's connection.
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// The indexes of `keys` cut into the groups one call may take: on a cluster, one group
    /// per slot (ascending slots, each in the keys' order); else one group of all of them,
    /// one round trip as before.
    pub fn slot_groups<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Vec<usize>> {
        if self.is_cluster() {
            cluster::by_slot(keys)
        } else if keys.is_empty() {
            Vec::new()
        } else {
            vec![(0..keys.len()).collect()]
        }
    }

    /// `PING`. On a cluster, `CLUSTER INFO` to any one node instead, answered as a `PING` only
    /// while the cluster serves every slot (`cluster_state:ok`), an error reply otherwise.
    pub async fn ping(&mut self) -> RedisResult<String> {
        match &self.inner.cluster {
            Some(cluster) => cluster::state(cluster).await,
            None => redis::cmd("PING").query_async::<String>(self).await,
        }
    }

    /// The `host:port` commands go to now (`None` while the Sentinels named none yet).
    pub fn primary_address(&self) -> Option<String> {
        self.primary().map(|primary| primary.address)
    }

    fn primary(&self) -> Option<Primary> {
        self.inner
            .primary
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn current(&self) -> RedisResult<ConnectionManager> {
        match self.primary() {
            Some(primary) => Ok(primary.conn),
            None => {
                self.find_primary();
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "Redis Sentinel has not named a primary yet",
                )
                .into())
            }
        }
    }

    /// Asks the Sentinels which node is the primary, in the background, unless a round is
    /// running already or there are no Sentinels.
    fn find_primary(&self) {
        let Some(finder) = &self.inner.finder else {
            return;
        };
        if finder.asking.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let Some(finder) = &this.inner.finder else {
                return;
            };
            let asked = tokio::time::timeout(finder.patience, async {
                finder.sentinels.lock().await.async_get_client().await
            })
            .await;
            match asked {
                Ok(Ok(client)) => this.switch_to(client),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "Redis Sentinel named no primary");
                }
                Err(_) => tracing::warn!(
                    patience_ms = finder.patience.as_millis(),
                    "Redis Sentinel did not name a primary in time"
                ),
            }
            tokio::time::sleep(LOOKUP_PAUSE).await;
            finder.asking.store(false, Ordering::Release);
        });
    }

    fn switch_to(&self, client: redis::Client) {
        let address = client.get_connection_info().addr().to_string();
        let mut primary = self
            .inner
            .primary
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if primary.as_ref().is_some_and(|p| p.address == address) {
            return;
        }
        match Primary::new(client, self.inner.config.clone()) {
            Ok(new) => {
                tracing::info!(
                    primary = %address,
                    previous = ?primary.as_ref().map(|p| &p.address),
                    "Redis Sentinel names a new primary: commands go there from now on"
                );
                *primary = Some(new);
            }
            Err(error) => tracing::warn!(%error, primary = %address, "cannot use the new primary"),
        }
    }

    /// Looks for another primary after an error that says this one is gone or demoted.
    fn check<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(error) = &result
            && primary_lost(error)
        {
            self.find_primary();
        }
        result
    }
}
