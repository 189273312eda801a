//! `AppState`: what every handler can reach, built once at start.

use std::sync::Arc;

use axum::extract::FromRef;
use platform::http::AdminToken;
use platform::http::health::Readiness;
use platform::http::outbox_admin::OutboxDb;
use platform::messaging::broker::Broker;
use platform::messaging::outbox::OutboxSignal;
use platform::storage::Database;
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::RedisHealth;

use crate::config::Config;
use crate::deductions::Deductions;
use crate::holds::batched::Ends;
use crate::stock::lock::Locker;

#[derive(Clone)]
pub struct AppState {
    /// PostgreSQL or MySQL, as `DATABASE_URL` names it.
    pub db: Database,
    pub redis: RedisConnection,
    /// Whether Redis is known down; [`crate::serve`] runs its check.
    pub redis_health: RedisHealth,
    /// Per-product stock locks.
    pub locker: Locker,
    /// `POST /deductions` and `POST /holds`, applied in batches per product set.
    pub deductions: Deductions,
    /// Confirms and cancels of holds, applied in batches.
    pub hold_ends: Ends,
    /// The RabbitMQ connection; [`crate::serve`] runs its supervisor.
    pub broker: Broker,
    pub admin_token: AdminToken,
    /// Wakes the outbox relay after a commit that wrote outbox rows.
    pub outbox: OutboxSignal,
    /// What `/readyz` probes.
    pub readiness: Readiness,
    pub config: Arc<Config>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("locker", &self.locker)
            .field("broker", &self.broker)
            .field("admin_token", &self.admin_token)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl FromRef<AppState> for AdminToken {
    fn from_ref(state: &AppState) -> Self {
        state.admin_token.clone()
    }
}

impl FromRef<AppState> for OutboxDb {
    fn from_ref(state: &AppState) -> Self {
        Self {
            db: state.db.clone(),
            signal: state.outbox.clone(),
        }
    }
}
