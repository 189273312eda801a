//! `REDIS_CLUSTER_URLS`: a Redis Cluster in place of one Redis, for everything a service
//! keeps there (docs/redis-cluster.md).
//!
//! A cluster answers a command whose keys fall in more than one of its 16,384 slots with
//! `CROSSSLOT`, and redis-rs refuses a pipeline that spans slots before sending it. So every
//! multi-key call of the services is cut by [`super::RedisConnection::slot_groups`]: the keys
//! that must change together (a token and its claim id, a lock and its waiter) share a hash
//! tag and so a slot; different tokens or products never need to change together (each
//! script decides key by key), so a batch is one call per slot, all sent at once.
//!
//! A master that dies makes its slots unanswerable until a replica takes over (the cluster's
//! `cluster-node-timeout` plus an election). A call for those slots is retried, redirected
//! and retried again for up to `REDIS_CLUSTER_WAIT_MS`, so a failover shorter than that
//! delays requests instead of failing them; only a call that outlasts it counts Redis down.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, TlsCertificates};

use super::{Inner, RedisConnection};
use crate::config;
use crate::storage::tls::CaBundle;

/// `REDIS_CLUSTER_WAIT_MS`'s default: above a failover with `cluster-node-timeout 2000`.
/// A cluster with Redis's default `cluster-node-timeout` (15 s) needs 20000 or more.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// Slots in a Redis Cluster.
const SLOTS: u16 = 16_384;

/// The longest pause between two tries of a call whose slot has no master (milliseconds).
const RETRY_PAUSE_MAX_MS: u64 = 250;

/// Where the cluster is and how long a call waits for one of its slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisCluster {
    /// `REDIS_CLUSTER_URLS`: seed nodes (`redis://` or `rediss://`), asked for the cluster's
    /// layout; any one that answers is enough.
    pub seeds: Vec<String>,
    /// `REDIS_CLUSTER_WAIT_MS`: how long one call may take, retries and redirects included,
    /// before it fails (and Redis counts as down).
    pub wait: Duration,
}

impl RedisCluster {
    /// Reads `REDIS_CLUSTER_URLS` and `REDIS_CLUSTER_WAIT_MS`; `None` when the URLs are unset.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        let wait = config::millis_at_least(
            "REDIS_CLUSTER_WAIT_MS",
            u64::try_from(DEFAULT_WAIT.as_millis()).unwrap_or(u64::MAX),
            1,
        )?;
        let cluster = Self::from_values(config::optional("REDIS_CLUSTER_URLS").as_deref(), wait)?;
        if cluster.is_some() && config::optional("REDIS_SENTINELS").is_some() {
            bail!(
                "REDIS_CLUSTER_URLS and REDIS_SENTINELS are both set: a cluster follows its own \
                 failovers; set one of them"
            );
        }
        Ok(cluster)
    }

    fn from_values(urls: Option<&str>, wait: Duration) -> anyhow::Result<Option<Self>> {
        let Some(urls) = urls else {
            return Ok(None);
        };
        let seeds: Vec<String> = urls
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .collect();
        if seeds.is_empty() {
            bail!("REDIS_CLUSTER_URLS is set but names no node: give redis://host:port,...");
        }
        for seed in &seeds {
            if !(seed.starts_with("redis://") || seed.starts_with("rediss://")) {
                bail!("REDIS_CLUSTER_URLS: {seed:?} is not a redis:// or rediss:// URL");
            }
            redis::Client::open(seed.as_str())
                .with_context(|| format!("REDIS_CLUSTER_URLS: {seed:?} is not a valid URL"))?;
        }
        Ok(Some(Self { seeds, wait }))
    }

    /// A connection that finds the cluster's layout lazily: the service starts while the
    /// cluster is down. Each node's connect and each reply are bounded by `timeout`; a call
    /// as a whole by [`RedisCluster::wait`].
    pub(super) fn connect(
        &self,
        timeout: Duration,
        ca: Option<&CaBundle>,
    ) -> anyhow::Result<ClusterConnection> {
        // Retries every 50–250 ms (jittered) until `wait` has passed: a killed master is
        // retried until a replica took its slots over, then the call is redirected there.
        // The pause is flat (`factor × 1^retry`): redis-rs computes `factor × base^retry` in
        // a u64, which with its default base of 2 overflows past about 60 retries (a panic
        // in a debug build), and a wait of seconds takes more retries than that.
        let wait_ms = u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX);
        let mut builder = ClusterClientBuilder::new(self.seeds.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .overall_response_timeout(Some(self.wait))
            .retries(u32::try_from(wait_ms / 50).unwrap_or(u32::MAX).max(1))
            .retry_wait_formula(RETRY_PAUSE_MAX_MS, 1)
            .min_retry_wait(50)
            .max_retry_wait(RETRY_PAUSE_MAX_MS);
        if let Some(ca) = ca {
            builder = builder.certs(TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.pem().as_bytes().to_vec()),
            });
        }
        let client = builder
            .build()
            .context("REDIS_CLUSTER_URLS does not make a cluster client")?;
        let config = ClusterConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout);
        Ok(client.get_pending_async_connection_with_config(config))
    }
}

/// A connection to the Redis Cluster `cluster` names, found lazily (the service starts while
/// the cluster is down). `timeout` bounds each node's connect and reply; the cluster's own
/// wait bounds a call with its retries (see [`RedisCluster`]).
pub fn connect_cluster(
    cluster: &RedisCluster,
    timeout: Duration,
    ca: Option<&CaBundle>,
) -> anyhow::Result<RedisConnection> {
    let connection = cluster.connect(timeout, ca)?;
    Ok(RedisConnection {
        inner: Arc::new(Inner {
            primary: RwLock::new(None),
            finder: None,
            cluster: Some(connection),
            config: ConnectionManagerConfig::new(),
            db: 0,
        }),
    })
}

/// `CLUSTER INFO` to any one node, answered as a `PING` only while the cluster serves every
/// slot (`cluster_state:ok`); otherwise an error reply, which says the cluster answers but
/// cannot serve, so a health check leaves Redis as it was (up during a failover's seconds,
/// down after a call outlasted the wait) and readiness names Redis. A `PING` to every node
/// would fail during each failover, and one node's `PONG` says nothing of the others' slots.
pub(super) async fn state(cluster: &ClusterConnection) -> RedisResult<String> {
    let answer = cluster
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("INFO").to_owned(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    let info: String = redis::from_redis_value(answer)?;
    if info.lines().any(|line| line.trim() == "cluster_state:ok") {
        Ok("PONG".to_owned())
    } else {
        Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ClusterDown),
            "the Redis Cluster does not serve every slot (cluster_state is not ok)",
        )))
    }
}

/// `REDIS_KEY_PREFIX`, put before every key (empty when unset). A brace is refused: on a
/// Redis Cluster the prefix's braces would be every key's hash tag, putting all of them in
/// one slot, or splitting the keys one script changes across slots.
pub fn key_prefix_from_env() -> anyhow::Result<String> {
    let prefix = std::env::var("REDIS_KEY_PREFIX").unwrap_or_default();
    check_key_prefix(&prefix)?;
    Ok(prefix)
}

fn check_key_prefix(prefix: &str) -> anyhow::Result<()> {
    if prefix.contains(['{', '}']) {
        bail!(
            "environment variable REDIS_KEY_PREFIX={prefix:?} holds a brace: the keys' own \
             braces choose their Redis Cluster slot"
        );
    }
    Ok(())
}

/// The slot of `key` as a Redis Cluster computes it: CRC16 (XMODEM) of its hash tag (the
/// first non-empty `{...}`), else of the whole key, modulo 16,384.
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOTS
}

fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The indexes of `keys` grouped by slot, ascending slots, each group in the keys' order.
pub(super) fn by_slot<K: AsRef<[u8]>>(keys: &[K]) -> Vec<Vec<usize>> {
    let mut slotted: Vec<(u16, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| (slot(key.as_ref()), i))
        .collect();
    // Stable: a slot's keys keep their order (a token twice in one batch is claimed in the
    // order its requests came).
    slotted.sort_by_key(|&(slot, _)| slot);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut last = None;
    for (slot, i) in slotted {
        match groups.last_mut() {
            Some(group) if last == Some(slot) => group.push(i),
            _ => groups.push(vec![i]),
        }
        last = Some(slot);
    }
    groups
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        for key in [
            "a",
            "idem:{0c2f}:claim",
            "x{}y",
            "{}{tag}",
            "t1:lock:product:{42}",
            "t1:lock:product:{42}:next",
            "{user1000}.following",
        ] {
            assert_eq!(
                Slot::new(slot(key.as_bytes())),
                Some(Slot::for_key(key)),
                "{key}"
            );
        }
        assert_eq!(slot(b"123456789"), 12_739, "Redis Cluster's own example");
    }

    #[test]
    fn a_tag_puts_keys_in_one_slot_and_groups_keep_order() {
        let keys = [
            "p:{7}",
            "p:{8}",
            "p:{7}:next",
            "p:{9}",
            "p:{8}:next",
            "p:{7}",
        ];
        let groups = by_slot(&keys);
        assert_eq!(groups.len(), 3);
        let slots: Vec<u16> = groups.iter().map(|g| slot(keys[g[0]].as_bytes())).collect();
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "ascending slots");
        assert!(groups.contains(&vec![0, 2, 5]), "{groups:?}");
        assert!(groups.contains(&vec![1, 4]), "{groups:?}");
    }

    #[test]
    fn a_key_prefix_with_a_brace_is_refused() {
        assert!(check_key_prefix("shop-1:").is_ok());
        for bad in ["{shop}:", "x{}", "a}"] {
            let error = check_key_prefix(bad).expect_err(bad).to_string();
            assert!(error.contains("REDIS_KEY_PREFIX"), "{error}");
        }
    }

    #[test]
    fn the_urls_are_checked() {
        let wait = DEFAULT_WAIT;
        assert_eq!(RedisCluster::from_values(None, wait).expect("unset"), None);
        let cluster = RedisCluster::from_values(Some("redis://a:1, redis://b:2,"), wait)
            .expect("valid")
            .expect("set");
        assert_eq!(cluster.seeds, ["redis://a:1", "redis://b:2"]);
        for bad in ["", " , ", "a:1", "http://a:1"] {
            let error = RedisCluster::from_values(Some(bad), wait).expect_err(bad);
            assert!(error.to_string().contains("REDIS_CLUSTER_URLS"), "{error}");
        }
    }
}
