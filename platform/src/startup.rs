//! Start-up both services share: the backing services a service connects to before it
//! serves (its database, PostgreSQL or MySQL as `DATABASE_URL` names it, created and migrated; Redis, lazily, so a service starts
//! while Redis is down; RabbitMQ, through the supervisor `serve` runs), the Redis health
//! loop every Redis call is gated by, and the HTTP API put together and served.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use sqlx::migrate::Migrator;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use utoipa::openapi::OpenApi;
use utoipa_swagger_ui::SwaggerUi;

use crate::http::health::Readiness;
use crate::http::{Cors, RateLimit};
use crate::messaging::background::keep_running;
use crate::messaging::broker::Broker;
use crate::storage::postgres::PoolSettings;
use crate::storage::redis::health::{CHECK_EVERY, RedisHealth};
use crate::storage::redis::{
    RedisCluster, RedisConnection, Sentinels, connect_cluster, connect_with_timeout,
};
use crate::storage::tls::ClientTls;
use crate::storage::{Backend, Database, MySqlStore};

/// Where the backing services are, as each service's configuration names them.
#[derive(Debug, Clone, Copy)]
pub struct BackingSettings<'a> {
    /// The database's URLs: a primary and its standbys, whichever takes writes is used.
    pub database_urls: &'a [String],
    pub database_max_connections: u32,
    pub redis_url: &'a str,
    pub redis_sentinels: Option<&'a Sentinels>,
    /// Set: Redis is this cluster, and `redis_url` and `redis_sentinels` are not used.
    pub redis_cluster: Option<&'a RedisCluster>,
    pub redis_timeout: Duration,
    pub amqp_urls: &'a [String],
    pub tls: &'a ClientTls,
}

/// The connections a service runs on, and what `/readyz` probes of them.
#[derive(Debug, Clone)]
pub struct Backing {
    pub db: Database,
    pub redis: RedisConnection,
    /// Whether Redis is known down; [`watch_redis`] keeps it current.
    pub redis_health: RedisHealth,
    /// The RabbitMQ connection; its supervisor runs with the messaging loops.
    pub broker: Broker,
    pub readiness: Readiness,
}

impl Backing {
    /// Connects to the database `DATABASE_URL` names (creating it when missing and applying
    /// that backend's migrations) and prepares Redis and RabbitMQ without waiting for them.
    pub async fn connect(
        settings: BackingSettings<'_>,
        migrators: Migrators<'_>,
    ) -> anyhow::Result<Self> {
        let db = connect_database(&settings, migrators)
            .await
            .context("preparing the database")?;
        let redis_ca = settings.tls.redis_ca.as_ref();
        let redis = match settings.redis_cluster {
            Some(cluster) => connect_cluster(cluster, settings.redis_timeout, redis_ca)?,
            None => connect_with_timeout(
                settings.redis_url,
                settings.redis_sentinels,
                settings.redis_timeout,
                redis_ca,
            )?,
        };
        let broker = Broker::cluster(settings.amqp_urls, settings.tls.amqp_ca.clone());
        let readiness = Readiness {
            db: db.clone(),
            redis: Some(redis.clone()),
            broker_up: broker.up(),
            lock_service: None,
            draining: CancellationToken::new(),
        };
        Ok(Self {
            db,
            redis,
            redis_health: RedisHealth::default(),
            broker,
            readiness,
        })
    }
}

/// A service's migrations, one history per backend (`migrations/<service>/<backend>/`).
#[derive(Debug, Clone, Copy)]
pub struct Migrators<'a> {
    pub postgres: &'a Migrator,
    pub mysql: &'a Migrator,
}

/// The pool of the backend the URLs name (the configuration checked they name one), its
/// database created and migrated.
async fn connect_database(
    settings: &BackingSettings<'_>,
    migrators: Migrators<'_>,
) -> anyhow::Result<Database> {
    let pool = PoolSettings {
        max_connections: settings.database_max_connections,
        ..PoolSettings::default()
    };
    let urls = settings.database_urls;
    let first = urls.first().context("no database URL")?;
    Ok(match Backend::of_url(first)? {
        Backend::Postgres => {
            crate::storage::postgres::connect_and_migrate(urls, &pool, migrators.postgres)
                .await?
                .into()
        }
        Backend::MySql => Database::MySql(MySqlStore(
            crate::storage::mysql::connect_and_migrate_any(urls, &pool, migrators.mysql).await?,
        )),
    })
}

/// Runs the Redis health check on `tasks` until `shutdown`, restarted if it ever panics: a
/// Redis marked down stays down until this loop sees it answer again.
pub fn watch_redis(
    tasks: &TaskTracker,
    health: &RedisHealth,
    redis: &RedisConnection,
    shutdown: &CancellationToken,
) {
    let (health, redis, stop) = (health.clone(), redis.clone(), shutdown.clone());
    tasks.spawn(keep_running("redis health", shutdown.clone(), move || {
        health
            .clone()
            .watch(redis.clone(), CHECK_EVERY, stop.clone())
    }));
}

/// A service's whole HTTP API: `routes` (with `state`), its document at `/openapi.json` and
/// the Swagger UI at `/docs`, behind the shared edge (request ids, tracing, metrics,
/// problem+json fallbacks, body limit), which applies `edge`: the request timeout, the rate
/// limit and the CORS origins.
pub fn app<S>(
    (routes, spec): (Router<S>, OpenApi),
    state: S,
    (request_timeout, rate_limit, cors): (Duration, RateLimit, &Cors),
) -> Router
where
    S: Clone + Send + Sync + 'static,
{
    let routed = routes
        .merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .with_state(state);
    crate::http::with_edge(routed, request_timeout, rate_limit, cors)
}

/// Serves `app` on `listener` until `shutdown` fires, then finishes the requests in flight.
pub async fn serve_http(
    listener: TcpListener,
    app: Router,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    // With each connection's peer address, which the rate limits key on.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await
        .context("serving HTTP")
}
