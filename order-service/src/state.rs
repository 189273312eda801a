//! What every handler and background loop shares.

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
use crate::identity::Identity;
use crate::orders::intake::Intake;
use crate::tokens::store::TokenStore;

#[derive(Clone, Debug)]
pub struct AppState {
    pub db: Database,
    pub tokens: TokenStore,
    /// Where `POST /orders` hands its order to be written with the next batch.
    pub intake: Intake,
    /// The connection the tokens use, for [`crate::serve`]'s health check.
    pub redis: RedisConnection,
    /// Whether Redis is known down; [`crate::serve`] runs its check.
    pub redis_health: RedisHealth,
    pub broker: Broker,
    pub readiness: Readiness,
    pub admin_token: AdminToken,
    /// Verifies end users' tokens when identity is on.
    pub identity: Identity,
    /// Wakes the outbox relay after a commit that wrote outbox rows.
    pub outbox: OutboxSignal,
    pub config: Arc<Config>,
}

impl FromRef<AppState> for Identity {
    fn from_ref(state: &AppState) -> Self {
        state.identity.clone()
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
