//! The loops every service runs beside its HTTP server: the broker supervisor, the outbox
//! relay and its maintenance, vacuuming where autovacuum is off, and the consumer of the
//! service's queue.
//!
//! Each loop is restarted if it panics: a dead relay or consumer would otherwise go unnoticed
//! while the HTTP API kept answering, and events would wait for reconciliation.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::messaging::MessagingConfig;
use crate::messaging::broker::Broker;
use crate::messaging::consumer::ConsumerStore;
use crate::messaging::consumer::{ConsumerSettings, Handler};
use crate::messaging::outbox::OutboxSignal;
use crate::messaging::relay::store::RelayStore;
use crate::messaging::retention::MaintenanceStore;
use crate::storage::Database;

/// What the loops of one service share.
#[derive(Debug, Clone)]
pub struct Messaging {
    pub db: Database,
    pub broker: Broker,
    pub config: MessagingConfig,
    pub outbox: OutboxSignal,
    /// The service's own tables that churn, vacuumed with the outbox when autovacuum is off
    /// (see [`crate::storage::vacuum`]).
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
        let Self {
            db,
            broker,
            config,
            outbox,
            churning_tables,
        } = self;
        let stop = shutdown.clone();
        tasks.spawn(keep_running("broker supervisor", stop.clone(), {
            let broker = broker.clone();
            move || broker.clone().supervise(stop.clone())
        }));
        // PostgreSQL only: InnoDB purges what its updates and deletes leave behind by itself.
        if let Database::Postgres(pool) = &db {
            let stop = shutdown.clone();
            tasks.spawn(keep_running("vacuum", stop.clone(), {
                let (db, every) = (pool.clone(), config.vacuum_every);
                move || {
                    crate::storage::vacuum::run(db.clone(), churning_tables, every, stop.clone())
                }
            }));
        }
        let settings = ConsumerSettings {
            queue,
            // Unique per process, so several instances can consume the same queue.
            consumer_tag: format!("{queue}-{}", uuid::Uuid::new_v4()),
            prefetch: config.consumer_prefetch,
            concurrency: config.consumer_concurrency,
            // One setting for every batching stage of the service.
            linger: config.relay.linger,
        };
        let loops = Loops {
            tasks,
            broker,
            config: &config,
            outbox,
            settings,
            shutdown,
        };
        match db {
            Database::Postgres(pool) => loops.spawn(pool, handler),
            Database::MySql(store) => loops.spawn(store, handler),
        }
    }
}

/// The loops that read and write the database, on the store of its backend.
struct Loops<'a> {
    tasks: &'a TaskTracker,
    broker: Broker,
    config: &'a MessagingConfig,
    outbox: OutboxSignal,
    settings: ConsumerSettings,
    shutdown: &'a CancellationToken,
}

impl Loops<'_> {
    fn spawn<S, H>(self, db: S, handler: H)
    where
        S: RelayStore + ConsumerStore + MaintenanceStore,
        H: Handler,
    {
        let Self {
            tasks,
            broker,
            config,
            outbox,
            settings,
            shutdown,
        } = self;
        let stop = shutdown.clone();
        tasks.spawn(keep_running("outbox relay", stop.clone(), {
            let (db, broker, settings) = (db.clone(), broker.clone(), config.relay.clone());
            move || {
                crate::messaging::relay::run(
                    db.clone(),
                    broker.clone(),
                    settings.clone(),
                    outbox.clone(),
                    stop.clone(),
                )
            }
        }));
        let stop = shutdown.clone();
        tasks.spawn(keep_running("outbox maintenance", stop.clone(), {
            let (db, retention) = (db.clone(), config.retention.clone());
            move || {
                crate::messaging::retention::maintain(db.clone(), retention.clone(), stop.clone())
            }
        }));
        let stop = shutdown.clone();
        tasks.spawn(keep_running("consumer", stop.clone(), move || {
            crate::messaging::consumer::run(
                broker.clone(),
                db.clone(),
                settings.clone(),
                handler.clone(),
                stop.clone(),
            )
        }));
    }
}

/// Runs the loop `start` makes until it returns (at `shutdown`); if it panics, logs that and
/// starts a new one after a second.
pub async fn keep_running<F, Fut>(name: &'static str, shutdown: CancellationToken, start: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match tokio::spawn(start()).await {
            Err(error) if error.is_panic() && !shutdown.is_cancelled() => {
                tracing::error!(
                    task = name,
                    "background task panicked; restarting it in 1 s"
                );
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_panicking_loop_is_started_again_until_it_returns() {
        let starts = Arc::new(AtomicU32::new(0));
        let counted = starts.clone();
        keep_running("test", CancellationToken::new(), move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                assert!(n >= 3, "a loop that dies on its first two runs");
            }
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 3);
    }
}
