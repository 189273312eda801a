//! What the relay asks of the database its outbox lives in, and PostgreSQL's answers. The
//! relay's rules (what is due, what a failure does to a row, when rows are marked) are the
//! relay's, in [`super`]; a store only reads and writes them, in its own dialect. MySQL's
//! store is [`crate::storage::mysql::relay`].

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::publish::backoff_of;
use super::{OutboxRow, RelaySettings};

/// A failed publish, as the row records it: its attempts so far, the error, when it is due
/// again and whether it is dead (its last attempt).
#[derive(Debug, Clone)]
pub struct Failure {
    pub event_id: Uuid,
    pub attempts: i32,
    pub error: String,
    pub delay: Duration,
    pub dead: bool,
}

impl Failure {
    /// What `error` makes of `row`'s next attempt under `settings` (logged here, once).
    pub(super) fn of(row: &OutboxRow, error: &str, settings: &RelaySettings) -> Self {
        let attempts = row.attempts + 1;
        let dead = attempts >= settings.max_attempts;
        if dead {
            tracing::error!(event_id = %row.event_id, attempts, error, "outbox row is dead after its last attempt");
        } else {
            tracing::warn!(event_id = %row.event_id, attempts, error, "publish failed; will retry");
        }
        Self {
            event_id: row.event_id,
            attempts,
            error: error.to_owned(),
            delay: backoff_of(attempts, settings),
            dead,
        }
    }
}

/// The outbox's rows as the relay reads and writes them. Every write is guarded by
/// `status = 'pending'`: a row an operator or another relay settled meanwhile is left as it is.
pub trait RelayStore: Clone + Send + Sync + 'static {
    /// A claimed batch: its rows stay locked to this relay until [`Claimed::settle`].
    type Claim: Claimed;

    /// Whether any row is due for the sweep: pending, `next_attempt_at` passed, and either
    /// tried before or at least `min_age` old. One autocommit statement.
    fn any_due(&self, min_age: Duration) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Locks up to `limit` due rows (as [`RelayStore::any_due`] means it) that no other relay
    /// holds, oldest due first, skipping locked ones.
    fn claim(
        &self,
        limit: i64,
        min_age: Duration,
    ) -> impl Future<Output = anyhow::Result<Self::Claim>> + Send;

    /// Marks these rows sent, in one autocommit statement.
    fn mark_sent(&self, ids: &[Uuid]) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Records failed publishes of rows not claimed (handed over in memory).
    fn record_failures(
        &self,
        failures: &[Failure],
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Rows a sweep claimed, locked until settled.
pub trait Claimed: Send {
    fn rows(&self) -> &[OutboxRow];

    /// Marks `sent` sent and records `failures`, then commits, releasing the rows.
    fn settle(
        self,
        sent: &[Uuid],
        failures: &[Failure],
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A claim on PostgreSQL: the transaction that holds the rows' locks.
#[derive(Debug)]
pub struct PgClaim {
    tx: Transaction<'static, Postgres>,
    rows: Vec<OutboxRow>,
}

impl RelayStore for PgPool {
    type Claim = PgClaim;

    async fn any_due(&self, min_age: Duration) -> anyhow::Result<bool> {
        sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM outbox
                WHERE status = 'pending' AND next_attempt_at <= now()
                  AND (attempts > 0 OR created_at <= now() - make_interval(secs => $1))) AS "any!""#,
            min_age.as_secs_f64(),
        )
        .fetch_one(self)
        .await
        .context("looking for outbox rows to sweep")
    }

    async fn claim(&self, limit: i64, min_age: Duration) -> anyhow::Result<PgClaim> {
        // Marking rows sent need not wait for its WAL flush: a mark lost in a crash only
        // publishes the rows again, which consumers deduplicate. The relay's next batch (and
        // every other commit waiting on the same flush) goes on without it. Sent with the
        // `BEGIN` as one simple query: one round trip fewer per batch.
        let mut tx = crate::raw::begin_async_commit(self)
            .await
            .context("beginning the relay transaction")?;
        let rows = sqlx::query_as!(
            OutboxRow,
            "SELECT event_id, exchange, routing_key, payload, headers, attempts FROM outbox
             WHERE status = 'pending' AND next_attempt_at <= now()
               AND (attempts > 0 OR created_at <= now() - make_interval(secs => $2))
             ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED",
            limit,
            min_age.as_secs_f64(),
        )
        .fetch_all(&mut *tx)
        .await
        .context("claiming outbox rows")?;
        Ok(PgClaim { tx, rows })
    }

    async fn mark_sent(&self, ids: &[Uuid]) -> anyhow::Result<()> {
        sqlx::query!(
            "UPDATE outbox SET status = 'sent', sent_at = now(), updated_at = now()
             WHERE event_id = ANY($1) AND status = 'pending'",
            ids,
        )
        .execute(self)
        .await
        .context("marking outbox rows sent")
        .map(drop)
    }

    async fn record_failures(&self, failures: &[Failure]) -> anyhow::Result<()> {
        if failures.is_empty() {
            return Ok(());
        }
        let mut conn = self.acquire().await.context("recording a failed publish")?;
        for failure in failures {
            record_failure(&mut conn, failure).await?;
        }
        Ok(())
    }
}

impl Claimed for PgClaim {
    fn rows(&self) -> &[OutboxRow] {
        &self.rows
    }

    async fn settle(mut self, sent: &[Uuid], failures: &[Failure]) -> anyhow::Result<()> {
        for failure in failures {
            record_failure(&mut self.tx, failure).await?;
        }
        sqlx::query!(
            "UPDATE outbox SET status = 'sent', sent_at = now(), updated_at = now()
             WHERE event_id = ANY($1)",
            sent,
        )
        .execute(&mut *self.tx)
        .await
        .context("marking outbox rows sent")?;
        self.tx
            .commit()
            .await
            .context("committing the relay transaction")
    }
}

async fn record_failure(conn: &mut sqlx::PgConnection, failure: &Failure) -> anyhow::Result<()> {
    sqlx::query!(
        "UPDATE outbox SET attempts = $2, last_error = $3, updated_at = now(),
                next_attempt_at = now() + make_interval(secs => $4),
                status = CASE WHEN $5 THEN 'dead' ELSE 'pending' END
         WHERE event_id = $1 AND status = 'pending'",
        failure.event_id,
        failure.attempts,
        failure.error,
        failure.delay.as_secs_f64(),
        failure.dead,
    )
    .execute(conn)
    .await
    .context("recording a failed publish")
    .map(drop)
}
