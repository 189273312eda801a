//! The outbox as operators see it (`platform::http::outbox_admin`): rows listed by status,
//! one row sent again; and the readiness probe's trivial statement.

use chrono::{DateTime, Utc};
use sqlx::{Acquire, MySql, MySqlExecutor};
use uuid::Uuid;

/// One outbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: i64,
    pub event_id: Uuid,
    pub exchange: String,
    pub routing_key: String,
    /// `pending`, `sent` or `dead` (the table's CHECK).
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub payload: serde_json::Value,
}

/// Up to `limit` rows of `status` with ids above `after`, by id (keyset pagination).
///
/// `FORCE INDEX (outbox_dead)`, `(status, id)`: one range in id order, whatever the
/// optimiser guesses of the share of `status`.
pub async fn list(
    db: impl MySqlExecutor<'_>,
    status: &str,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<Entry>> {
    sqlx::query_as!(
        Entry,
        "SELECT id, event_id AS `event_id: Uuid`, exchange, routing_key, status, attempts,
                next_attempt_at AS `next_attempt_at: DateTime<Utc>`, last_error,
                created_at AS `created_at: DateTime<Utc>`, sent_at AS `sent_at: DateTime<Utc>`,
                payload AS `payload: serde_json::Value`
         FROM outbox FORCE INDEX (outbox_dead)
         WHERE status = ? AND id > ? ORDER BY id LIMIT ?",
        status,
        after,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Puts row `id` back in the queue with a fresh attempt budget, whatever its status; returns
/// the row as it then is, or `None` when there is no such row.
///
/// No `UPDATE … RETURNING` on MariaDB: the update, then a read of the row, in a transaction
/// begun here (a savepoint inside a caller's), so the read sees the update and nothing after
/// it (the update's lock is held until the commit). Whether the row exists is the read's to
/// say: the update's count is of rows matched, which would say the same here, but a count is
/// not a row.
pub async fn retry<'c>(
    conn: impl Acquire<'c, Database = MySql>,
    id: i64,
) -> sqlx::Result<Option<Entry>> {
    let mut tx = conn.begin().await?;
    sqlx::query!(
        "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = NOW(6),
                last_error = NULL, updated_at = NOW(6)
         WHERE id = ?",
        id,
    )
    .execute(&mut *tx)
    .await?;
    let entry = sqlx::query_as!(
        Entry,
        "SELECT id, event_id AS `event_id: Uuid`, exchange, routing_key, status, attempts,
                next_attempt_at AS `next_attempt_at: DateTime<Utc>`, last_error,
                created_at AS `created_at: DateTime<Utc>`, sent_at AS `sent_at: DateTime<Utc>`,
                payload AS `payload: serde_json::Value`
         FROM outbox WHERE id = ?",
        id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(entry)
}

/// A trivial statement, for readiness probes: `Ok` when the database answers.
pub async fn ping(db: impl MySqlExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query_scalar!("SELECT 1 AS `ping!: i64`")
        .fetch_one(db)
        .await
        .map(drop)
}
