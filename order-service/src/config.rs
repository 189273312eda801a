//! order-service configuration, read from the environment. Every variable has a working
//! local default; a malformed or out-of-range value stops the start with an error naming the
//! variable.

pub mod url;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use platform::config as env;
use platform::http::{Cors, RateLimit};
use platform::messaging::MessagingConfig;
use platform::startup::BackingSettings;
use platform::storage::redis::{RedisCluster, Sentinels};
use platform::storage::tls::ClientTls;

use self::url::http_url;
use crate::identity::IdentityConfig;
use crate::orders::payment::PaymentWindow;
use crate::tokens::signed::TokenSecret;

#[derive(Debug, Clone)]
pub struct Config {
    /// `HTTP_ADDR`: where the API listens.
    pub http_addr: SocketAddr,
    /// `DATABASE_URLS` (a primary and its standbys) or `DATABASE_URL`: the service's own
    /// database, created at start when missing, on whichever host takes writes.
    pub database_urls: Vec<String>,
    /// `DATABASE_MAX_CONNECTIONS`: pool size.
    pub database_max_connections: u32,
    /// `REDIS_URL`: idempotency token store. With Sentinels, only how to talk to the primary
    /// they name (see `Sentinels`).
    pub redis_url: String,
    /// `REDIS_SENTINELS` and `REDIS_SENTINEL_MASTER`: Sentinels that name the primary, which
    /// the connection follows through a failover. Unset: `REDIS_URL`'s server.
    pub redis_sentinels: Option<Sentinels>,
    /// `REDIS_CLUSTER_URLS` (and `REDIS_CLUSTER_WAIT_MS`): a Redis Cluster that holds
    /// everything this service keeps in Redis, in place of `REDIS_URL`'s server.
    pub redis_cluster: Option<RedisCluster>,
    /// `REDIS_KEY_PREFIX`: prepended to every Redis key, to share one Redis safely.
    pub redis_key_prefix: String,
    /// `REDIS_TIMEOUT_MS`: how long connecting to Redis, and each Redis reply, may take
    /// before Redis counts as down (token requests then answer 503 at once until it
    /// answers again). Default `500`.
    pub redis_timeout: Duration,
    /// `AMQP_URL`: RabbitMQ, including the vhost; or `AMQP_URLS`: the nodes of a RabbitMQ
    /// cluster, comma-separated, tried in turn (see `platform::messaging::broker`). Never empty.
    pub amqp_urls: Vec<String>,
    /// `ADMIN_TOKEN`: bearer token of the admin endpoints; unset refuses them all.
    pub admin_token: Option<String>,
    /// `INVENTORY_URL`: inventory-service, asked by reconciliation.
    pub inventory_url: String,
    /// `IDEMPOTENCY_TOKEN_TTL_SECS`: how long an issued token may be used.
    pub idempotency_token_ttl: Duration,
    /// `IDEMPOTENCY_TOKEN_SECRET`: the key tokens are signed with, the same on every
    /// instance. Unset (the default): one is generated once and kept in the database.
    pub idempotency_token_secret: Option<TokenSecret>,
    /// `REQUEST_TIMEOUT_SECS`: a request running longer is answered 503.
    pub request_timeout: Duration,
    /// `RECONCILE_AFTER_SECS`: a `PENDING` order this old is checked with inventory.
    pub reconcile_after: Duration,
    /// `RECONCILE_EVERY_SECS`: how often reconciliation looks for such orders.
    pub reconcile_every: Duration,
    /// `INTAKE_BATCH_MAX`: the most orders one intake commit writes (at least 1). Default 64.
    pub intake_batch_max: usize,
    /// `ORDER_PAYMENT_WINDOW_SECS`: how long a reserved order waits for its payment
    /// (docs/contract.md §3.1.1); 0, the default, is off. At most a day.
    pub payment_window: PaymentWindow,
    /// How often the expiry looks for orders whose payment window closed. Not a variable: the
    /// contract wants them expired within seconds, and an idle round is one indexed read.
    /// Tests lengthen it to see a confirm refused before the expiry ran.
    pub payment_expiry_every: Duration,
    /// Relay, consumer and retention knobs (see `platform::messaging::MessagingConfig`).
    pub messaging: MessagingConfig,
    /// `RATE_LIMIT_PER_SEC` (0: off) and `RATE_LIMIT_BURST` (0: the rate), per client address.
    pub rate_limit: RateLimit,
    /// `SHUTDOWN_DRAIN_SECS`: after a shutdown signal, how long `/readyz` answers 503 while the
    /// service still serves, before the graceful shutdown. Default 0.
    pub shutdown_drain: Duration,
    /// `AUTH_JWT_SECRET` or `AUTH_JWKS_URL`, `AUTH_JWT_ISSUER`, `AUTH_JWT_AUDIENCE`,
    /// `AUTH_JWT_LEEWAY_SECS`: end-user identity from bearer JWTs. Unset (the default): off,
    /// every caller anonymous.
    pub identity: IdentityConfig,
    /// `CORS_ALLOWED_ORIGINS`: origins a browser page may call the API from; unset: none.
    pub cors: Cors,
    /// `REDIS_CA_FILE` and `AMQP_CA_FILE`: private CAs for `rediss://` and `amqps://`.
    pub tls: ClientTls,
}

/// Half a second: an order past its due time is `EXPIRED`, and its stock on its way back,
/// well within the seconds the contract allows (docs/contract.md §3.1.1).
const PAYMENT_EXPIRY_EVERY: Duration = Duration::from_millis(500);

impl Default for Config {
    /// The local defaults, without looking at the environment.
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_urls: vec!["postgres://postgres@127.0.0.1:5432/orders".to_owned()],
            database_max_connections: 20,
            redis_url: "redis://127.0.0.1:6379/0".to_owned(),
            redis_sentinels: None,
            redis_cluster: None,
            redis_key_prefix: String::new(),
            redis_timeout: platform::storage::redis::DEFAULT_TIMEOUT,
            amqp_urls: vec!["amqp://guest:guest@127.0.0.1:5672/%2f".to_owned()],
            admin_token: None,
            inventory_url: "http://127.0.0.1:8081".to_owned(),
            idempotency_token_ttl: Duration::from_secs(3600),
            idempotency_token_secret: None,
            request_timeout: Duration::from_secs(10),
            reconcile_after: Duration::from_secs(30),
            reconcile_every: Duration::from_secs(10),
            intake_batch_max: 64,
            payment_window: PaymentWindow::OFF,
            payment_expiry_every: PAYMENT_EXPIRY_EVERY,
            messaging: MessagingConfig::default(),
            rate_limit: RateLimit::default(),
            shutdown_drain: Duration::ZERO,
            identity: IdentityConfig::default(),
            cors: Cors::default(),
            tls: ClientTls::default(),
        }
    }
}

impl Config {
    /// Reads every variable; an error names the variable that is wrong.
    pub fn from_env() -> anyhow::Result<Self> {
        let http_addr = env::string("HTTP_ADDR", "127.0.0.1:8080");
        Ok(Self {
            http_addr: http_addr
                .parse()
                .with_context(|| format!("HTTP_ADDR={http_addr:?} is not a socket address"))?,
            database_urls: env::database_urls("postgres://postgres@127.0.0.1:5432/orders")?,
            database_max_connections: env::at_least("DATABASE_MAX_CONNECTIONS", 20, 1)?,
            redis_url: env::string("REDIS_URL", "redis://127.0.0.1:6379/0"),
            redis_sentinels: Sentinels::from_env()?,
            redis_cluster: RedisCluster::from_env()?,
            redis_key_prefix: platform::storage::redis::key_prefix_from_env()?,
            // Below a millisecond every call would time out; see docs/configuration.md, "Why these defaults".
            redis_timeout: env::millis_at_least("REDIS_TIMEOUT_MS", 500, 1)?,
            amqp_urls: env::amqp_nodes("amqp://guest:guest@127.0.0.1:5672/%2f")?,
            admin_token: env::optional("ADMIN_TOKEN"),
            inventory_url: http_url(
                "INVENTORY_URL",
                &env::string("INVENTORY_URL", "http://127.0.0.1:8081"),
            )?,
            idempotency_token_ttl: env::positive_secs("IDEMPOTENCY_TOKEN_TTL_SECS", 3600)?,
            idempotency_token_secret: token_secret()?,
            request_timeout: env::positive_secs("REQUEST_TIMEOUT_SECS", 10)?,
            reconcile_after: env::positive_secs("RECONCILE_AFTER_SECS", 30)?,
            reconcile_every: env::positive_secs("RECONCILE_EVERY_SECS", 10)?,
            intake_batch_max: env::at_least("INTAKE_BATCH_MAX", 64, 1)?,
            payment_window: PaymentWindow::from_env()?,
            payment_expiry_every: PAYMENT_EXPIRY_EVERY,
            messaging: MessagingConfig::from_env()?,
            rate_limit: RateLimit::from_env()?,
            shutdown_drain: platform::shutdown::drain_from_env()?,
            identity: IdentityConfig::from_env()?,
            cors: Cors::from_env()?,
            tls: ClientTls::from_env()?,
        })
    }
}

/// `IDEMPOTENCY_TOKEN_SECRET`: a short key would make token MACs guessable offline.
fn token_secret() -> anyhow::Result<Option<TokenSecret>> {
    const MIN_BYTES: usize = 32;
    match env::optional("IDEMPOTENCY_TOKEN_SECRET") {
        Some(secret) if secret.len() < MIN_BYTES => anyhow::bail!(
            "environment variable IDEMPOTENCY_TOKEN_SECRET is out of range: it must be at least \
             {MIN_BYTES} bytes long"
        ),
        secret => Ok(secret.map(TokenSecret::new)),
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
