//! inventory-service: owns products and stock. Stock is deducted under a per-product Redis
//! lock ([`stock::lock`]) **and** a conditional SQL update ([`stock::queries`]); the update is
//! what keeps stock correct, the lock keeps contention cheap.
//!
//! The modules are its capabilities: [`products`] (the catalogue and restocks), [`stock`]
//! (the locks and the conditional update), [`deductions`] (`POST /deductions`, and the group
//! commit a hold's try shares), [`holds`] (try / confirm / cancel with expiry) and
//! [`reservations`] (the saga's side: order events in, stock reserved or given back).
//! [`openapi`] holds the route table and the document.
//!
//! [`build_state`] connects everything, [`build_app`] routes, [`serve`] runs until its
//! shutdown token fires and then drains.

use std::sync::{Arc, LazyLock};

use anyhow::Context;
use axum::Router;
use platform::http::AdminToken;
use platform::messaging::background::Messaging;
use platform::messaging::outbox::OutboxSignal;
use platform::startup::{Backing, Migrators};
use shared::keys::{self, RedisKeys};
use sqlx::migrate::Migrator;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub mod config;
pub mod deductions;
pub mod error;
pub mod health;
pub mod holds;
pub mod input;
pub mod metrics;
pub mod openapi;
pub mod products;
pub mod replay;
pub mod reservations;
pub mod state;
pub mod stock;

pub use config::Config;
pub use error::ApiError;
pub use state::AppState;

use crate::reservations::consumer::OrderEvents;
use crate::stock::lock;

/// The service's migrations, embedded. During a rolling update an instance of the previous
/// release may (re)start after a newer one migrated: migrations only expand what older code
/// reads (docs/operating.md, "Rolling updates"), so the versions it does not know do not stop it.
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations/inventory-service/postgres");
    migrator.set_ignore_missing(true);
    migrator
});

/// [`MIGRATOR`] on MySQL and MariaDB.
pub static MYSQL_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations/inventory-service/mysql");
    migrator.set_ignore_missing(true);
    migrator
});

/// The service's migrations on each backend, for start-up to apply the one its URL names.
pub fn migrators() -> Migrators<'static> {
    Migrators {
        postgres: &MIGRATOR,
        mysql: &MYSQL_MIGRATOR,
    }
}

/// Connects to the database, PostgreSQL or MySQL as `DATABASE_URL` names it (creating and
/// migrating it), and prepares Redis (lazily: the service starts while Redis is down) and
/// RabbitMQ (connected by the supervisor that [`serve`] runs); registers the metrics.
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    metrics::register();
    let Backing {
        db,
        redis,
        redis_health,
        broker,
        mut readiness,
    } = Backing::connect(config.backing(), migrators()).await?;
    // The one place the stock lock's implementation is chosen.
    let options = lock::LockOptions {
        ttl: config.lock_ttl,
        wait: config.lock_wait,
        renew: true,
    };
    let locker = match config.stock_lock {
        lock::Backend::Redis | lock::Backend::RedisCluster => {
            lock::Locker::new(lock::RedisLock::new(
                redis.clone(),
                RedisKeys::new(config.redis_key_prefix.clone()),
                options,
                redis_health.clone(),
            ))
        }
        lock::Backend::Redlock => {
            let masters = config
                .redlock_urls
                .iter()
                .map(|url| {
                    platform::storage::redis::connect_with_timeout(
                        url,
                        None,
                        config.redis_timeout,
                        config.tls.redis_ca.as_ref(),
                    )
                })
                .collect::<anyhow::Result<Vec<_>>>()
                .context("REDLOCK_URLS")?;
            anyhow::ensure!(
                masters.len() >= lock::redlock::MIN_MASTERS,
                "REDLOCK_URLS names {} Redis masters: Redlock needs at least {}",
                masters.len(),
                lock::redlock::MIN_MASTERS
            );
            // The masters are the lock service: a minority down changes nothing, a majority
            // down bypasses the lock (counted), as with one Redis down.
            readiness.redis = None;
            let redlock = lock::redlock::Redlock::new(
                masters,
                RedisKeys::new(config.redis_key_prefix.clone()),
                options,
                config.redlock_drift,
            );
            // Without a majority the lock service is down: readiness names it `redis`.
            let probe = redlock.clone();
            readiness.lock_service = Some(platform::http::health::Probe {
                name: "redis",
                answers: Arc::new(move || probe.answers()),
            });
            lock::Locker::new(redlock)
        }
        lock::Backend::Etcd => {
            let etcd = lock::etcd::EtcdLock::connect(
                &config.etcd_endpoints,
                RedisKeys::new(config.redis_key_prefix.clone()),
                options,
            )
            .await
            .context("ETCD_ENDPOINTS")?;
            // etcd is the lock service then: readiness asks after it instead of Redis.
            readiness.redis = None;
            let probe = etcd.clone();
            readiness.lock_service = Some(platform::http::health::Probe {
                name: lock::etcd::BACKEND,
                answers: Arc::new(move || probe.answers()),
            });
            lock::Locker::new(etcd)
        }
        lock::Backend::Database => {
            // Nothing of this service's is kept in Redis then: its readiness does not hang on it.
            readiness.redis = None;
            lock::Locker::new(lock::database::RowLock::new(options))
        }
    };
    metrics::register_lock(locker.backend());
    let deductions = deductions::Deductions::new(db.clone(), locker.clone());
    let hold_ends = holds::batched::Ends::spawn(&db);
    Ok(AppState {
        readiness,
        db,
        redis,
        redis_health,
        locker,
        deductions,
        hold_ends,
        broker,
        admin_token: AdminToken::new(config.admin_token.clone()),
        outbox: OutboxSignal::default(),
        config: Arc::new(config),
    })
}

/// The whole HTTP API (the routes of [`openapi::split`], plus `/openapi.json` and the Swagger
/// UI at `/docs`), behind the shared edge (request ids, tracing, metrics, problem+json
/// fallbacks, body limit, timeout).
pub fn build_app(state: AppState) -> Router {
    let config = Arc::clone(&state.config);
    let edge = (config.request_timeout, config.rate_limit, &config.cors);
    platform::startup::app(openapi::split(), state, edge)
}

/// Serves `listener` and runs the background tasks (broker supervisor, outbox relay and
/// retention, order-events consumer, hold expiry) until `shutdown`
/// fires; then finishes in-flight requests and waits for the tasks to stop.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks = TaskTracker::new();
    let messaging = Messaging {
        db: state.db.clone(),
        broker: state.broker.clone(),
        config: state.config.messaging.clone(),
        outbox: state.outbox.clone(),
        churning_tables: &["products", "holds", "held_units"],
    };
    let handler = OrderEvents::new(state.db.clone(), state.locker.clone(), state.outbox.clone());
    messaging.spawn(
        &tasks,
        keys::INVENTORY_ORDER_EVENTS_QUEUE,
        handler,
        &shutdown,
    );
    let schedule = holds::expiry::Schedule {
        every: state.config.hold_expiry_interval,
        keep: state.config.messaging.retention.keep,
    };
    holds::expiry::spawn(&tasks, &state.db, schedule, &shutdown);
    // Redis serves the Redis lock alone: with another lock it is not watched.
    if matches!(
        state.config.stock_lock,
        lock::Backend::Redis | lock::Backend::RedisCluster
    ) {
        platform::startup::watch_redis(&tasks, &state.redis_health, &state.redis, &shutdown);
    }
    tasks.close();
    let served = platform::startup::serve_http(listener, build_app(state), &shutdown).await;
    // Also stops the tasks when the server itself failed.
    shutdown.cancel();
    tasks.wait().await;
    served
}

/// The whole process: configuration from the environment, bind `HTTP_ADDR`, serve until
/// SIGTERM or SIGINT. The binary's `main`; also what tests run when they need the service in a
/// process of its own (to pause it, or to read metrics that are its alone).
pub async fn run_from_env() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let listener = TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding HTTP_ADDR {}", config.http_addr))?;
    tracing::info!(addr = %listener.local_addr()?, "inventory-service listening");
    let state = build_state(config).await?;
    let shutdown = platform::shutdown::on_signal(
        state.config.shutdown_drain,
        state.readiness.draining.clone(),
    );
    serve(state, listener, shutdown).await
}
