//! `GET /healthz` (the process runs) and `GET /readyz` (every backing system answers and the
//! service is not shutting down).

use std::time::Duration;

use crate::storage::Database;
use crate::storage::redis::RedisConnection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use shared::Problem;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long one dependency may take to answer a readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/readyz` checks.
#[derive(Clone)]
pub struct Readiness {
    pub db: Database,
    /// `None` for a service that keeps nothing in Redis (inventory-service on the database's
    /// row locks): Redis is then no concern of its readiness.
    pub redis: Option<RedisConnection>,
    /// `true` while the broker connection is up; kept current by the broker supervisor.
    pub broker_up: watch::Receiver<bool>,
    /// A lock service other than Redis the service cannot lock without (inventory-service on
    /// etcd), if any.
    pub lock_service: Option<Probe>,
    /// Cancelled when a shutdown signal arrives ([`crate::shutdown::on_signal`]): from then on
    /// the instance is not ready, so load balancers stop sending it new work while it drains.
    pub draining: CancellationToken,
}

/// A system whose state its client already tracks (an etcd lease's keep-alive, say): asking it
/// costs no call.
#[derive(Clone)]
pub struct Probe {
    /// The name `/readyz` gives it when it is down.
    pub name: &'static str,
    pub answers: std::sync::Arc<dyn Fn() -> bool + Send + Sync>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").finish_non_exhaustive()
    }
}

pub async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

impl Readiness {
    /// The names of the systems that did not answer: the database's backend (`postgres` or
    /// `mysql`), `redis`, `rabbitmq`, and the lock service's name (`etcd`).
    pub async fn down(&self) -> Vec<&'static str> {
        let database = async {
            tokio::time::timeout(PROBE_TIMEOUT, self.db.answers())
                .await
                .unwrap_or(false)
        };
        let redis = async {
            let Some(mut conn) = self.redis.clone() else {
                return true;
            };
            tokio::time::timeout(PROBE_TIMEOUT, crate::storage::redis::ping(&mut conn))
                .await
                .unwrap_or(false)
        };
        let (database, redis) = tokio::join!(database, redis);
        let rabbitmq = *self.broker_up.borrow();
        let lock_service = self
            .lock_service
            .as_ref()
            .map(|probe| (probe.name, (probe.answers)()));
        [
            (self.db.backend().name(), database),
            ("redis", redis),
            ("rabbitmq", rabbitmq),
        ]
        .into_iter()
        .chain(lock_service)
        .filter_map(|(name, up)| (!up).then_some(name))
        .collect()
    }

    pub async fn respond(&self) -> Response {
        if self.draining.is_cancelled() {
            return not_ready("shutting down".to_owned());
        }
        let down = self.down().await;
        if down.is_empty() {
            return axum::Json(json!({"status": "ready"})).into_response();
        }
        not_ready(format!("unreachable: {}", down.join(", ")))
    }
}

fn not_ready(detail: String) -> Response {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not-ready",
        "Not ready",
        detail,
    )
    .into_response()
}
