//! Retention and the backlog gauges: sent outbox rows, processed message ids and failure
//! counts deleted once old, a batch per statement, and the pending rows counted every second.
//! PostgreSQL's statements are here; MySQL's are [`crate::storage::mysql::maintenance`].

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long sent outbox rows and processed message ids are kept, and how often to look.
#[derive(Debug, Clone)]
pub struct Retention {
    pub keep: Duration,
    pub sweep_every: Duration,
    /// Rows deleted per statement, so a sweep never holds long locks.
    pub batch: i64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep: Duration::from_secs(7 * 24 * 3600),
            sweep_every: Duration::from_secs(60),
            batch: 1000,
        }
    }
}

/// What is kept only for a while: sent outbox rows, processed message ids, failure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiring {
    SentOutboxRows,
    ProcessedMessages,
    MessageFailures,
}

impl Expiring {
    pub const ALL: [Self; 3] = [
        Self::SentOutboxRows,
        Self::ProcessedMessages,
        Self::MessageFailures,
    ];
}

/// The pending rows: how many, and how old the oldest is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub pending: i64,
    pub oldest_secs: f64,
}

/// What [`maintain`] asks of the database. PostgreSQL's answers are here; MySQL's are
/// [`crate::storage::mysql::maintenance`].
pub trait MaintenanceStore: Clone + Send + Sync + 'static {
    fn backlog(&self) -> impl Future<Output = sqlx::Result<Backlog>> + Send;

    /// Deletes at most `batch` rows of `what` older than `keep`; how many it deleted.
    fn delete_expired(
        &self,
        what: Expiring,
        keep: Duration,
        batch: i64,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;
}

/// Keeps the backlog gauges current and deletes old sent rows and processed message ids
/// in batches, until `shutdown`.
pub async fn maintain<S: MaintenanceStore>(
    db: S,
    retention: Retention,
    shutdown: CancellationToken,
) {
    let mut gauges = tokio::time::interval(Duration::from_secs(1));
    let mut sweep = tokio::time::interval(retention.sweep_every);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = gauges.tick() => {
                match db.backlog().await {
                    Ok(backlog) => {
                        metrics::gauge!(crate::messaging::relay::OUTBOX_BACKLOG)
                            .set(backlog.pending as f64);
                        metrics::gauge!(crate::messaging::relay::OUTBOX_OLDEST_UNSENT_SECONDS)
                            .set(backlog.oldest_secs);
                    }
                    Err(error) => tracing::debug!(%error, "cannot read the outbox backlog"),
                }
            }
            _ = sweep.tick() => {
                if let Err(error) = sweep_old_rows(&db, &retention, &shutdown).await {
                    tracing::warn!(%error, "retention sweep failed");
                }
            }
        }
    }
}

impl MaintenanceStore for sqlx::PgPool {
    async fn backlog(&self) -> sqlx::Result<Backlog> {
        let row = sqlx::query!(
            r#"SELECT count(*) AS "backlog!",
                      COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) AS "oldest!"
               FROM outbox WHERE status = 'pending'"#,
        )
        .fetch_one(self)
        .await?;
        Ok(Backlog {
            pending: row.backlog,
            oldest_secs: row.oldest,
        })
    }

    async fn delete_expired(
        &self,
        what: Expiring,
        keep: Duration,
        batch: i64,
    ) -> sqlx::Result<u64> {
        let keep = keep.as_secs_f64();
        let deleted = match what {
            Expiring::SentOutboxRows => sqlx::query!(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE status = 'sent'
                 AND sent_at < now() - make_interval(secs => $1) LIMIT $2)",
                keep,
                batch,
            )
            .execute(self)
            .await?,
            Expiring::ProcessedMessages => sqlx::query!(
                "DELETE FROM processed_messages WHERE message_id IN (SELECT message_id FROM processed_messages
                 WHERE processed_at < now() - make_interval(secs => $1) LIMIT $2)",
                keep,
                batch,
            )
            .execute(self)
            .await?,
            Expiring::MessageFailures => sqlx::query!(
                "DELETE FROM message_failures WHERE message_id IN (SELECT message_id FROM message_failures
                 WHERE updated_at < now() - make_interval(secs => $1) LIMIT $2)",
                keep,
                batch,
            )
            .execute(self)
            .await?,
        };
        Ok(deleted.rows_affected())
    }
}

/// Each expiring table in turn, a batch at a time, until a batch comes back short.
async fn sweep_old_rows<S: MaintenanceStore>(
    db: &S,
    retention: &Retention,
    shutdown: &CancellationToken,
) -> sqlx::Result<()> {
    for what in Expiring::ALL {
        delete_in_batches(retention.batch, shutdown, || {
            db.delete_expired(what, retention.keep, retention.batch)
        })
        .await?;
    }
    Ok(())
}

/// Runs `delete`, a statement that deletes at most `batch` rows, until one deletes less than
/// a batch or `shutdown` fires.
async fn delete_in_batches<F, Deleted>(
    batch: i64,
    shutdown: &CancellationToken,
    mut delete: F,
) -> sqlx::Result<()>
where
    F: FnMut() -> Deleted,
    Deleted: Future<Output = sqlx::Result<u64>>,
{
    while !shutdown.is_cancelled() {
        if delete().await? < batch as u64 {
            break;
        }
    }
    Ok(())
}
