//! The transactional outbox: events are written as rows inside the business transaction and
//! published by the relay after commit, so an event exists if and only if its change does.
//!
//! Both services own an `outbox` table of the same shape (see their migrations).

use serde::Serialize;
use shared::events::{Envelope, Event};
use sqlx::PgConnection;

use crate::telemetry::TraceContext;

/// How this process's writers reach its relay, right after they committed outbox rows.
/// Cheap to clone.
///
/// [`OutboxSignal::committed`] hands the relay the rows themselves: it publishes them as they
/// are, without reading them back, and marks them sent afterwards (see
/// [`crate::messaging::relay`]). [`OutboxSignal::wake`] only asks it to look in the table now,
/// for rows this process did not write (an operator's retry).
#[derive(Debug, Clone, Default)]
pub struct OutboxSignal(std::sync::Arc<Signal>);

#[derive(Debug, Default)]
struct Signal {
    notify: tokio::sync::Notify,
    handed: std::sync::Mutex<Handoff>,
}

/// What the relay finds when it looks: rows handed to it, when each was handed, and whether
/// someone asked it to look in the table.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    pub(crate) rows: Vec<(tokio::time::Instant, NewOutboxRow)>,
    pub(crate) look: bool,
}

impl Handoff {
    /// The rows handed over, and a wake counted as one.
    pub(crate) fn len(&self) -> usize {
        self.rows.len() + usize::from(self.look)
    }
}

/// Rows waiting for the relay beyond which more handed rows are dropped (a broker away for
/// long): they are in the table, and the relay's sweep sends them.
pub const HANDOFF_LIMIT: usize = 10_000;

impl OutboxSignal {
    /// Rows this process has just committed, for its relay to publish. Call after the commit
    /// (before it, the relay could publish an event whose change then rolls back).
    pub fn committed(&self, rows: impl IntoIterator<Item = NewOutboxRow>) {
        let now = tokio::time::Instant::now();
        let mut handed = self.0.handed.lock().unwrap_or_else(|e| e.into_inner());
        let room = HANDOFF_LIMIT.saturating_sub(handed.rows.len());
        let before = handed.rows.len();
        handed
            .rows
            .extend(rows.into_iter().take(room).map(|row| (now, row)));
        if handed.rows.len() > before {
            drop(handed);
            self.0.notify.notify_one();
        }
    }

    /// Asks the relay to run its sweep now (rows tried before, or old enough; see
    /// [`crate::messaging::relay`]).
    pub fn wake(&self) {
        self.0.handed.lock().unwrap_or_else(|e| e.into_inner()).look = true;
        self.0.notify.notify_one();
    }

    /// Resolves at the next hand-off or wake (or at once if one happened since the last wait).
    pub async fn woken(&self) {
        self.0.notify.notified().await;
    }

    /// How many rows (and a wake as one) wait for the relay now.
    pub(crate) fn waiting(&self) -> usize {
        self.0
            .handed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Takes what was handed over since the last call.
    pub(crate) fn take(&self) -> Handoff {
        std::mem::take(&mut *self.0.handed.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An outbox row about to be written: the envelope serialised, its routing key, and the trace
/// context that rides along as AMQP headers.
#[derive(Debug, Clone)]
pub struct NewOutboxRow {
    pub event_id: uuid::Uuid,
    pub exchange: String,
    pub routing_key: &'static str,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
}

impl NewOutboxRow {
    pub fn new<E: Event + Serialize>(
        exchange: &str,
        envelope: &Envelope<E>,
        trace: &TraceContext,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            event_id: envelope.event_id,
            exchange: exchange.to_owned(),
            routing_key: envelope.event.routing_key(),
            payload: serde_json::to_value(envelope)?,
            headers: serde_json::json!(trace.headers()),
        })
    }
}

/// Outbox rows as columns, one array each, the way `unnest` takes them: for [`enqueue_all`],
/// and for a statement that writes the rows together with the change they announce.
#[derive(Debug, Default)]
pub struct OutboxColumns<'a> {
    pub event_ids: Vec<uuid::Uuid>,
    pub exchanges: Vec<&'a str>,
    pub routing_keys: Vec<&'a str>,
    pub payloads: Vec<&'a serde_json::Value>,
    pub headers: Vec<&'a serde_json::Value>,
}

impl<'a> OutboxColumns<'a> {
    pub fn of(rows: &'a [NewOutboxRow]) -> Self {
        let mut columns = Self::default();
        for row in rows {
            columns.event_ids.push(row.event_id);
            columns.exchanges.push(row.exchange.as_str());
            columns.routing_keys.push(row.routing_key);
            columns.payloads.push(&row.payload);
            columns.headers.push(&row.headers);
        }
        columns
    }
}

/// Writes every row to the outbox in one statement (inside the caller's transaction); after
/// the commit, the caller hands the same rows to [`OutboxSignal::committed`].
pub async fn enqueue_all(conn: &mut PgConnection, rows: &[NewOutboxRow]) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let c = OutboxColumns::of(rows);
    // unnest keeps the rows in order, so the relay publishes them in the batch's order.
    sqlx::query!(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[])",
        &c.event_ids,
        &c.exchanges as &[&str],
        &c.routing_keys as &[&str],
        &c.payloads as &[&serde_json::Value],
        &c.headers as &[&serde_json::Value],
    )
    .execute(conn)
    .await
    .map(drop)
}

/// How long sent outbox rows and processed message ids are kept, and how often to look.
#[derive(Debug, Clone)]
pub struct Retention {
    pub keep: std::time::Duration,
    pub sweep_every: std::time::Duration,
    /// Rows deleted per statement, so a sweep never holds long locks.
    pub batch: i64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep: std::time::Duration::from_secs(7 * 24 * 3600),
            sweep_every: std::time::Duration::from_secs(60),
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
        keep: std::time::Duration,
        batch: i64,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;
}

/// Keeps the backlog gauges current and deletes old sent rows and processed message ids
/// in batches, until `shutdown`.
pub async fn maintain<S: MaintenanceStore>(
    db: S,
    retention: Retention,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut gauges = tokio::time::interval(std::time::Duration::from_secs(1));
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
        keep: std::time::Duration,
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
    shutdown: &tokio_util::sync::CancellationToken,
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
    shutdown: &tokio_util::sync::CancellationToken,
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
