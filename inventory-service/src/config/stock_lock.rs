//! The stock lock's settings (`STOCK_LOCK` and what each backend needs), checked together so
//! that a start with a lock that cannot work is refused, naming the variable.

use platform::config;

use super::Config;
use crate::stock::lock;

/// `STOCK_LOCK=redis-cluster` needs `REDIS_CLUSTER_URLS`; and once those put Redis on a
/// cluster, the Redis lock is there too, so `redis` (the default) means `redis-cluster`.
pub(super) fn with_cluster_lock(mut config: Config) -> anyhow::Result<Config> {
    match (config.stock_lock, config.redis_cluster.is_some()) {
        (lock::Backend::RedisCluster, false) => anyhow::bail!(
            "environment variable REDIS_CLUSTER_URLS is not set: STOCK_LOCK=redis-cluster needs \
             the seed nodes of a Redis Cluster"
        ),
        (lock::Backend::Redis, true) => config.stock_lock = lock::Backend::RedisCluster,
        _ => {}
    }
    Ok(config)
}

/// Refuses a Redlock drift allowance that leaves a lock too short a validity to be renewed:
/// `REDLOCK_DRIFT_MS` plus 1 % of the TTL must stay under a third of `LOCK_TTL_MS`, the
/// renewal period.
pub(super) fn check_redlock_drift(config: &Config) -> anyhow::Result<()> {
    let allowance = config.redlock_drift + config.lock_ttl / 100;
    anyhow::ensure!(
        config.stock_lock != lock::Backend::Redlock || allowance < config.lock_ttl / 3,
        "environment variable REDLOCK_DRIFT_MS={} leaves no validity: with 1 % of \
         LOCK_TTL_MS it must stay under a third of LOCK_TTL_MS ({} ms)",
        config.redlock_drift.as_millis(),
        (config.lock_ttl / 3).as_millis()
    );
    Ok(())
}

/// `REDLOCK_URLS` when `STOCK_LOCK=redlock`: at least [`lock::redlock::MIN_MASTERS`] Redis
/// URLs; an entry that is not one is named by its position (a URL may carry a password).
pub(super) fn redlock_urls() -> anyhow::Result<Vec<String>> {
    let redlock =
        config::optional("STOCK_LOCK").is_some_and(|value| value.trim() == lock::redlock::BACKEND);
    let Some(list) = config::optional("REDLOCK_URLS").filter(|_| redlock) else {
        anyhow::ensure!(
            !redlock,
            "environment variable REDLOCK_URLS is not set: STOCK_LOCK=redlock needs at least {} \
             independent Redis masters",
            lock::redlock::MIN_MASTERS
        );
        return Ok(Vec::new());
    };
    let urls: Vec<String> = list.split(',').map(|url| url.trim().to_owned()).collect();
    for (position, url) in urls.iter().enumerate() {
        redis::Client::open(url.as_str()).map_err(|_| {
            anyhow::anyhow!(
                "environment variable REDLOCK_URLS: entry {} is not a Redis URL",
                position + 1
            )
        })?;
    }
    anyhow::ensure!(
        urls.len() >= lock::redlock::MIN_MASTERS,
        "environment variable REDLOCK_URLS names {} Redis masters: Redlock needs at least {}",
        urls.len(),
        lock::redlock::MIN_MASTERS
    );
    // One server named twice would vote twice: its loss alone could lose every lock.
    let mut distinct = urls.clone();
    distinct.sort();
    distinct.dedup();
    anyhow::ensure!(
        distinct.len() == urls.len(),
        "environment variable REDLOCK_URLS names a Redis master twice: each must be independent"
    );
    Ok(urls)
}

/// `ETCD_ENDPOINTS` when `STOCK_LOCK=etcd`: one or more `http://host:port` (or `host:port`);
/// TLS (`https://`) is not built in, and is refused rather than sent in the clear.
pub(super) fn etcd_endpoints() -> anyhow::Result<Vec<String>> {
    let etcd =
        config::optional("STOCK_LOCK").is_some_and(|value| value.trim() == lock::etcd::BACKEND);
    let Some(list) = config::optional("ETCD_ENDPOINTS").filter(|_| etcd) else {
        anyhow::ensure!(
            !etcd,
            "environment variable ETCD_ENDPOINTS is not set: STOCK_LOCK=etcd needs the members \
             of an etcd cluster"
        );
        return Ok(Vec::new());
    };
    parse_etcd_endpoints(&list)
}

fn parse_etcd_endpoints(list: &str) -> anyhow::Result<Vec<String>> {
    let endpoints: Vec<String> = list.split(',').map(|e| e.trim().to_owned()).collect();
    for (position, endpoint) in endpoints.iter().enumerate() {
        let address = endpoint.strip_prefix("http://").unwrap_or(endpoint);
        let valid = !address.contains('/')
            && address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        anyhow::ensure!(
            valid,
            "environment variable ETCD_ENDPOINTS: entry {} ({endpoint:?}) is not \
             http://host:port (TLS to etcd is not supported)",
            position + 1
        );
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use platform::storage::redis::RedisCluster;

    use super::*;

    #[test]
    fn etcd_endpoints_are_plain_http_addresses() {
        assert_eq!(
            parse_etcd_endpoints("http://10.0.0.1:2379, etcd-1:2379").expect("valid"),
            ["http://10.0.0.1:2379", "etcd-1:2379"]
        );
        for refused in [
            "https://etcd:2379",
            "etcd",
            "http://etcd:port",
            ":2379",
            "a:1,,b:2",
        ] {
            let error = parse_etcd_endpoints(refused)
                .expect_err(refused)
                .to_string();
            assert!(error.contains("ETCD_ENDPOINTS"), "{error}");
        }
    }

    #[test]
    fn a_redis_cluster_carries_the_redis_lock_and_redis_cluster_needs_one() {
        let cluster = RedisCluster {
            seeds: vec!["redis://127.0.0.1:7000".to_owned()],
            wait: Duration::from_secs(5),
        };
        let with = |stock_lock, redis_cluster| Config {
            stock_lock,
            redis_cluster,
            ..Config::default()
        };
        let moved = with_cluster_lock(with(lock::Backend::Redis, Some(cluster.clone())));
        assert_eq!(
            moved.expect("moved").stock_lock,
            lock::Backend::RedisCluster
        );
        let etcd = with_cluster_lock(with(lock::Backend::Etcd, Some(cluster)));
        assert_eq!(etcd.expect("etcd").stock_lock, lock::Backend::Etcd);
        let alone = with_cluster_lock(with(lock::Backend::RedisCluster, None));
        assert!(
            alone
                .expect_err("refused")
                .to_string()
                .contains("REDIS_CLUSTER_URLS")
        );
        let plain = with_cluster_lock(with(lock::Backend::Redis, None));
        assert_eq!(plain.expect("plain").stock_lock, lock::Backend::Redis);
    }
}
