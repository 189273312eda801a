//! order-service: takes orders exactly once per idempotency token, writes each with its
//! `order.created` event in one transaction, and settles them from inventory's answers.

pub mod config;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod openapi;
mod ops;
pub mod orders;
pub mod state;
pub mod tokens;

use std::sync::{Arc, LazyLock};

use anyhow::Context;
use axum::Router;
use platform::http::AdminToken;
use platform::messaging::background::{Messaging, keep_running};
use platform::messaging::outbox::OutboxSignal;
use platform::startup::{Backing, Migrators};
use shared::keys::{self, RedisKeys};
use sqlx::migrate::Migrator;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::identity::Identity;
use crate::orders::intake::{Intake, Writer};
use crate::orders::reconcile::ReconcileSettings;
use crate::orders::settle::consumer::InventoryEvents;
use crate::state::AppState;
use crate::tokens::signed::{TokenSecret, TokenSigner};
use crate::tokens::store::TokenStore;

/// The service's migrations, embedded, one history per backend. During a rolling update an
/// instance of the previous release may (re)start after a newer one migrated: migrations only
/// expand what older code reads (docs/operating.md, "Rolling updates"), so the versions it
/// does not know do not stop it.
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations/order-service/postgres");
    migrator.set_ignore_missing(true);
    migrator
});

/// [`MIGRATOR`] on MySQL and MariaDB.
pub static MYSQL_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations/order-service/mysql");
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

/// Connects to everything the service needs (creating and migrating its database). Nothing
/// runs in the background yet; `serve` starts the loops.
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    metrics::register();
    orders::intake::register_metrics();
    let Backing {
        db,
        redis,
        redis_health,
        broker,
        readiness,
    } = Backing::connect(config.backing(), migrators())
        .await
        .context("preparing the orders database")?;
    let secret = match &config.idempotency_token_secret {
        Some(secret) => secret.clone(),
        None => crate::tokens::secret_queries::load_or_store(&db, &TokenSecret::generate())
            .await
            .context("reading the idempotency token secret")?,
    };
    Ok(AppState {
        intake: Intake::new(config.intake_batch_max),
        tokens: TokenStore::new(
            redis.clone(),
            RedisKeys::new(config.redis_key_prefix.clone()),
            config.idempotency_token_ttl,
            TokenSigner::new(secret),
            redis_health.clone(),
        ),
        redis,
        redis_health,
        db,
        broker,
        readiness,
        admin_token: AdminToken::new(config.admin_token.clone()),
        identity: Identity::from_config(&config.identity).context("preparing identity")?,
        outbox: OutboxSignal::default(),
        config: Arc::new(config),
    })
}

/// The HTTP API with its edge middleware, Swagger UI and OpenAPI document.
pub fn build_app(state: AppState) -> Router {
    let config = Arc::clone(&state.config);
    let edge = (config.request_timeout, config.rate_limit, &config.cors);
    platform::startup::app(openapi::split(), state, edge)
}

/// Runs the service as its binary does: configuration from the environment, shutdown on
/// SIGTERM or SIGINT.
pub async fn run_from_env() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let listener = TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding {}", config.http_addr))?;
    let state = build_state(config).await?;
    let shutdown = platform::shutdown::on_signal(
        state.config.shutdown_drain,
        state.readiness.draining.clone(),
    );
    serve(state, listener, shutdown).await
}

/// Serves `listener` and runs the background loops until `shutdown`; then stops accepting,
/// finishes in-flight requests and lets each loop reach a safe point before returning.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks = TaskTracker::new();
    let config = &state.config;
    let messaging = Messaging {
        db: state.db.clone(),
        broker: state.broker.clone(),
        config: config.messaging.clone(),
        outbox: state.outbox.clone(),
        churning_tables: &["orders"],
    };
    let handler = InventoryEvents::new(
        state.db.clone(),
        state.outbox.clone(),
        config.payment_window,
    );
    messaging.spawn(
        &tasks,
        keys::ORDER_INVENTORY_EVENTS_QUEUE,
        handler,
        &shutdown,
    );
    let reconcile = ReconcileSettings {
        inventory_url: config.inventory_url.clone(),
        admin_token: config.admin_token.clone(),
        after: config.reconcile_after,
        every: config.reconcile_every,
        batch: 100,
        payment_window: config.payment_window,
    };
    // Supervised like the loops above: a round that panics must not end reconciliation,
    // which is what recovers every lost event.
    tasks.spawn(keep_running("reconciliation", shutdown.clone(), {
        let (db, outbox, stop) = (state.db.clone(), state.outbox.clone(), shutdown.clone());
        move || orders::reconcile::run(db.clone(), outbox.clone(), reconcile.clone(), stop.clone())
    }));
    // Runs with the window off too: orders that started to wait under an earlier setting
    // still expire.
    tasks.spawn(keep_running("payment expiry", shutdown.clone(), {
        let (db, outbox, stop) = (state.db.clone(), state.outbox.clone(), shutdown.clone());
        let every = config.payment_expiry_every;
        move || orders::payment::expiry::run(db.clone(), outbox.clone(), every, stop.clone())
    }));
    platform::startup::watch_redis(&tasks, &state.redis_health, &state.redis, &shutdown);
    tasks.spawn(keep_running("token give-back", shutdown.clone(), {
        let (tokens, stop) = (state.tokens.clone(), shutdown.clone());
        move || tokens.clone().give_back_abandoned(stop.clone())
    }));
    // Not a supervised loop: its queue is taken once. It stops only after the server has
    // answered its last request (each of which may wait for a batch), then drains the queue.
    let intake_stop = CancellationToken::new();
    tasks.spawn({
        let (intake, stop) = (state.intake.clone(), intake_stop.clone());
        let writer = Writer {
            db: state.db.clone(),
            tokens: state.tokens.clone(),
            outbox: state.outbox.clone(),
        };
        async move {
            if let Err(error) = intake.run(writer, stop).await {
                tracing::error!(error = %format!("{error:#}"), "order intake stopped");
            }
        }
    });
    tasks.close();
    tracing::info!(addr = %listener.local_addr()?, "order-service listening");
    let served = platform::startup::serve_http(listener, build_app(state), &shutdown).await;
    intake_stop.cancel();
    served?;
    shutdown.cancel();
    tasks.wait().await;
    Ok(())
}
