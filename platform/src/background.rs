//! The loops every service runs beside its HTTP server: the broker supervisor, the outbox
//! relay and its maintenance, vacuuming where autovacuum is off, and the consumer of the service's queue.

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::amqp::Broker;
use crate::config::MessagingConfig;
use crate::consumer::{ConsumerSettings, Handler};
use crate::outbox::OutboxSignal;

/// What the loops of one service share.
#[derive(Debug, Clone)]
pub struct Messaging {
    pub db: PgPool,
    pub broker: Broker,
    pub config: MessagingConfig,
    pub outbox: OutboxSignal,
    /// The service's own tables that churn, vacuumed with the outbox when autovacuum is off
    /// (see [`crate::vacuum`]).
    pub churning_tables: &'static [&'static str],
}

impl Messaging {
    /// Spawns every loop on `tasks`, consuming `queue` with `handler`; they stop at `shutdown`.
    pub fn spawn<H: Handler>(
        self,
        tasks: &TaskTracker,
        queue: &'static str,
        handler: H,
        shutdown: &CancellationToken,
    ) {
        tasks.spawn(self.broker.clone().supervise(shutdown.clone()));
        tasks.spawn(crate::relay::run(
            self.db.clone(),
            self.broker.clone(),
            self.config.relay.clone(),
            self.outbox,
            shutdown.clone(),
        ));
        tasks.spawn(crate::outbox::maintain(
            self.db.clone(),
            self.config.retention.clone(),
            shutdown.clone(),
        ));
        tasks.spawn(crate::vacuum::run(
            self.db.clone(),
            self.churning_tables,
            self.config.vacuum_every,
            shutdown.clone(),
        ));
        tasks.spawn(crate::consumer::run(
            self.broker,
            self.db,
            ConsumerSettings {
                queue,
                // Unique per process, so several instances can consume the same queue.
                consumer_tag: format!("{queue}-{}", uuid::Uuid::new_v4()),
                prefetch: self.config.consumer_prefetch,
                concurrency: self.config.consumer_concurrency,
            },
            handler,
            shutdown.clone(),
        ));
    }
}
