//! The service's configuration: plain environment variables, each with a working local default.

use std::net::SocketAddr;
use std::time::Duration;

use platform::config;
use platform::http::{Cors, RateLimit};
use platform::messaging::MessagingConfig;
use platform::startup::BackingSettings;
use platform::storage::redis::{RedisCluster, Sentinels};
use platform::storage::tls::ClientTls;

mod stock_lock;

use crate::stock::lock;

/// Everything the service reads from its environment, read once at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// `HTTP_ADDR`: where the HTTP API listens. Default `127.0.0.1:8081`.
    pub http_addr: SocketAddr,
    /// `DATABASE_URLS` (a primary and its standbys) or `DATABASE_URL`: the service's own
    /// PostgreSQL database, created on start when missing, on whichever host takes writes.
    /// Default `postgres://postgres@127.0.0.1:5432/inventory`.
    pub database_urls: Vec<String>,
    /// `DATABASE_MAX_CONNECTIONS`: size of the connection pool. Default `20`.
    pub database_max_connections: u32,
    /// `REDIS_URL`: the Redis that holds the stock locks. Default `redis://127.0.0.1:6379/0`.
    /// With Sentinels, only how to talk to the primary they name (see `Sentinels`).
    pub redis_url: String,
    /// `REDIS_SENTINELS` and `REDIS_SENTINEL_MASTER`: Sentinels that name the primary, which
    /// the connection follows through a failover. Unset (the default): `REDIS_URL`'s server.
    pub redis_sentinels: Option<Sentinels>,
    /// `REDIS_CLUSTER_URLS` (and `REDIS_CLUSTER_WAIT_MS`): a Redis Cluster that holds
    /// everything this service keeps in Redis, in place of `REDIS_URL`'s server.
    pub redis_cluster: Option<RedisCluster>,
    /// `REDIS_KEY_PREFIX`: put before every Redis key, so several deployments (or test runs)
    /// can share one Redis. Default empty.
    pub redis_key_prefix: String,
    /// `REDIS_TIMEOUT_MS`: how long connecting to Redis, and each Redis reply, may take
    /// before Redis counts as down (then deductions bypass the lock until it answers
    /// again). Default `500`.
    pub redis_timeout: Duration,
    /// `AMQP_URL`: the RabbitMQ broker. Default `amqp://guest:guest@127.0.0.1:5672/%2f`. Or
    /// `AMQP_URLS`: the nodes of a RabbitMQ cluster, comma-separated, tried in turn (see
    /// `platform::messaging::broker`). Never empty.
    pub amqp_urls: Vec<String>,
    /// `ADMIN_TOKEN`: the bearer token admin endpoints require. Unset (the default): every
    /// admin request answers 401, and a warning is logged at start.
    pub admin_token: Option<String>,
    /// `STOCK_LOCK`: the lock service behind the per-product stock lock: `redis` (the default,
    /// `REDIS_URL`), `redis-cluster` (`REDIS_CLUSTER_URLS`; also what `redis` means once those
    /// are set), `redlock` (`REDLOCK_URLS`), `etcd` (`ETCD_ENDPOINTS`) or `database` (no
    /// lock service: the rows of the service's own database).
    pub stock_lock: lock::Backend,
    /// `REDLOCK_URLS`: the independent Redis masters of `STOCK_LOCK=redlock`, comma-separated;
    /// at least 3 (an odd count wastes none). Empty otherwise.
    pub redlock_urls: Vec<String>,
    /// `REDLOCK_DRIFT_MS`: the clock drift Redlock allows for, beyond 1 % of `LOCK_TTL_MS`.
    /// Default `2`.
    pub redlock_drift: Duration,
    /// `ETCD_ENDPOINTS`: the members of the etcd cluster of `STOCK_LOCK=etcd`, comma-separated
    /// (`http://host:port` or `host:port`). Empty otherwise.
    pub etcd_endpoints: Vec<String>,
    /// `LOCK_TTL_MS`: time to live of a product's Redis lock; renewed every third of it while
    /// held. Default `10000`; at least `100`.
    pub lock_ttl: Duration,
    /// `LOCK_WAIT_MS`: how long a deduction waits for its locks (and for its turn, when it keeps
    /// losing races) before answering 503 `busy`. Default `5000`.
    pub lock_wait: Duration,
    /// `REQUEST_TIMEOUT_SECS`: an HTTP request still running after this answers 503. Default `10`.
    pub request_timeout: Duration,
    /// Relay, consumer and retention knobs (see `platform::messaging::MessagingConfig`).
    pub messaging: MessagingConfig,
    /// `RATE_LIMIT_PER_SEC` (0: off, the default) and `RATE_LIMIT_BURST` (0 or unset: the
    /// rate), per client address.
    pub rate_limit: RateLimit,
    /// `SHUTDOWN_DRAIN_SECS`: after a shutdown signal, how long `/readyz` answers 503 while the
    /// service still serves, before the graceful shutdown. Default `0`.
    pub shutdown_drain: Duration,
    /// `RESERVATIONS_REQUIRE_ADMIN` (`true`/`false`; default `true` when `AUTH_JWT_SECRET` or
    /// `AUTH_JWKS_URL` is set here too, else `false`): `GET /reservations/{id}` answers only
    /// with the admin token. Turn it on wherever order-service has end-user
    /// identity on: a reservation says what an order holds, and its reader cannot be told
    /// from its owner here.
    pub reservations_require_admin: bool,
    /// `CORS_ALLOWED_ORIGINS`: origins a browser page may call the API from; unset: none.
    pub cors: Cors,
    /// `HOLD_TTL_SECS`: how long a hold lasts when its try names no `ttl_secs`. Default `900`;
    /// 1 to 86,400.
    pub hold_ttl_secs: i64,
    /// `HOLD_EXPIRY_INTERVAL_MS`: how often each instance looks for holds past their deadline.
    /// Default `500`; 10 to 60,000. A hold expires within about this much of its deadline.
    pub hold_expiry_interval: Duration,
    /// `REDIS_CA_FILE` and `AMQP_CA_FILE`: private CAs for `rediss://` and `amqps://`.
    pub tls: ClientTls,
}

impl Default for Config {
    /// The local defaults, without looking at the environment.
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            database_urls: vec!["postgres://postgres@127.0.0.1:5432/inventory".to_owned()],
            database_max_connections: 20,
            redis_url: "redis://127.0.0.1:6379/0".to_owned(),
            redis_sentinels: None,
            redis_cluster: None,
            redis_key_prefix: String::new(),
            redis_timeout: platform::storage::redis::DEFAULT_TIMEOUT,
            amqp_urls: vec!["amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()],
            admin_token: None,
            stock_lock: lock::Backend::default(),
            redlock_urls: Vec::new(),
            redlock_drift: Duration::from_millis(2),
            etcd_endpoints: Vec::new(),
            lock_ttl: Duration::from_millis(10_000),
            lock_wait: Duration::from_millis(5_000),
            request_timeout: Duration::from_secs(10),
            messaging: MessagingConfig::default(),
            rate_limit: RateLimit::default(),
            shutdown_drain: Duration::ZERO,
            reservations_require_admin: false,
            cors: Cors::default(),
            hold_ttl_secs: 900,
            hold_expiry_interval: Duration::from_millis(500),
            tls: ClientTls::default(),
        }
    }
}

impl Config {
    /// Reads every variable; an error names the variable that is wrong.
    pub fn from_env() -> anyhow::Result<Self> {
        let defaults = Self::default();
        let read = Self {
            http_addr: config::parsed("HTTP_ADDR", defaults.http_addr)?,
            database_urls: config::database_urls(&defaults.database_urls[0])?,
            database_max_connections: config::at_least(
                "DATABASE_MAX_CONNECTIONS",
                defaults.database_max_connections,
                1,
            )?,
            redis_url: config::string("REDIS_URL", &defaults.redis_url),
            redis_sentinels: Sentinels::from_env()?,
            redis_cluster: RedisCluster::from_env()?,
            redis_key_prefix: platform::storage::redis::key_prefix_from_env()?,
            // Below a millisecond every call would time out; see docs/configuration.md, "Why these defaults".
            redis_timeout: config::millis_at_least("REDIS_TIMEOUT_MS", 500, 1)?,
            amqp_urls: config::amqp_nodes(&defaults.amqp_urls[0])?,
            admin_token: config::optional("ADMIN_TOKEN"),
            stock_lock: config::parsed("STOCK_LOCK", defaults.stock_lock)?,
            redlock_urls: stock_lock::redlock_urls()?,
            redlock_drift: config::millis_at_least("REDLOCK_DRIFT_MS", 2, 0)?,
            etcd_endpoints: stock_lock::etcd_endpoints()?,
            // Below 100 ms a renewal every third of the TTL races its own expiry.
            lock_ttl: config::millis_at_least("LOCK_TTL_MS", 10_000, 100)?,
            lock_wait: config::millis_at_least("LOCK_WAIT_MS", 5_000, 1)?,
            request_timeout: config::positive_secs("REQUEST_TIMEOUT_SECS", 10)?,
            messaging: MessagingConfig::from_env()?,
            rate_limit: RateLimit::from_env()?,
            shutdown_drain: platform::shutdown::drain_from_env()?,
            // A deployment that gives both services the same identity settings gets the
            // contract's behaviour without a second switch.
            reservations_require_admin: config::parsed(
                "RESERVATIONS_REQUIRE_ADMIN",
                ["AUTH_JWT_SECRET", "AUTH_JWKS_URL"]
                    .iter()
                    .any(|name| config::optional(name).is_some()),
            )?,
            cors: Cors::from_env()?,
            hold_ttl_secs: config::within("HOLD_TTL_SECS", defaults.hold_ttl_secs, 1..=86_400)?,
            hold_expiry_interval: Duration::from_millis(config::within(
                "HOLD_EXPIRY_INTERVAL_MS",
                500,
                10..=60_000,
            )?),
            tls: ClientTls::from_env()?,
        };
        stock_lock::check_redlock_drift(&read)?;
        stock_lock::with_cluster_lock(read)
    }
}

impl Config {
    /// Where the backing services are, for [`platform::startup::Backing::connect`].
    pub fn backing(&self) -> BackingSettings<'_> {
        BackingSettings {
            database_urls: &self.database_urls,
            database_max_connections: self.database_max_connections,
            redis_url: &self.redis_url,
            redis_sentinels: self.redis_sentinels.as_ref(),
            redis_cluster: self.redis_cluster.as_ref(),
            redis_timeout: self.redis_timeout,
            amqp_urls: &self.amqp_urls,
            tls: &self.tls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_match_the_contract() {
        let config = Config::default();
        assert_eq!(config.http_addr.to_string(), "127.0.0.1:8081");
        assert_eq!(config.lock_ttl, Duration::from_secs(10));
        assert!(config.admin_token.is_none());
    }
}
