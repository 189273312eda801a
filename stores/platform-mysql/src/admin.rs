//! The outbox as operators see it: rows listed by status, and one row sent again.

use chrono::{DateTime, Utc};
use sqlx::{Acquire, MySql, MySqlExecutor};
use uuid::Uuid;

use crate::parse_json;

/// One outbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: i64,
    pub event_id: Uuid,
    pub exchange: String,
    pub routing_key: String,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub payload: serde_json::Value,
}

/// An [`Entry`] as stored: its payload still text.
struct Stored {
    id: i64,
    event_id: Uuid,
    exchange: String,
    routing_key: String,
    status: String,
    attempts: i32,
    next_attempt_at: DateTime<Utc>,
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    sent_at: Option<DateTime<Utc>>,
    payload: String,
}

impl TryFrom<Stored> for Entry {
    type Error = sqlx::Error;

    fn try_from(row: Stored) -> sqlx::Result<Self> {
        Ok(Self {
            id: row.id,
            event_id: row.event_id,
            exchange: row.exchange,
            routing_key: row.routing_key,
            status: row.status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error,
            created_at: row.created_at,
            sent_at: row.sent_at,
            payload: parse_json(&row.payload)?,
        })
    }
}

/// Up to `limit` rows of `status` with ids above `after`, by id.
pub async fn list(
    db: impl MySqlExecutor<'_>,
    status: &str,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<Entry>> {
    let rows = sqlx::query_as!(
        Stored,
        "SELECT id, event_id AS `event_id: Uuid`, exchange, routing_key, status, attempts,
                next_attempt_at AS `next_attempt_at: DateTime<Utc>`, last_error,
                created_at AS `created_at: DateTime<Utc>`, sent_at AS `sent_at: DateTime<Utc>`,
                payload
         FROM outbox WHERE status = ? AND id > ? ORDER BY id LIMIT ?",
        status,
        after,
        limit,
    )
    .fetch_all(db)
    .await?;
    rows.into_iter().map(Entry::try_from).collect()
}

/// Puts row `id` back in the queue with a fresh attempt budget; the row as it then is, or
/// `None` when there is no such row. The update and the read share a transaction (no
/// `UPDATE … RETURNING` on MySQL); whether the row exists is the read's to say, since the
/// update's count is of rows matched.
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
    let row = sqlx::query_as!(
        Stored,
        "SELECT id, event_id AS `event_id: Uuid`, exchange, routing_key, status, attempts,
                next_attempt_at AS `next_attempt_at: DateTime<Utc>`, last_error,
                created_at AS `created_at: DateTime<Utc>`, sent_at AS `sent_at: DateTime<Utc>`,
                payload
         FROM outbox WHERE id = ?",
        id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.map(Entry::try_from).transpose()
}
