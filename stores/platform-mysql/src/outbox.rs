//! The outbox: rows written with the change they announce, claimed and marked by the relay,
//! counted for the backlog gauges, deleted once sent and old.

use std::time::Duration;

use sqlx::{MySqlConnection, MySqlExecutor};
use uuid::Uuid;

use crate::{fitting_error, json_ids, micros, parse_json};

/// A row to write.
#[derive(Debug, Clone)]
pub struct NewRow<'a> {
    pub event_id: Uuid,
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub payload: &'a serde_json::Value,
    pub headers: &'a serde_json::Value,
}

/// Writes every row in one statement (inside the caller's transaction), ids ascending in the
/// order given, so the sweep publishes them in that order.
pub async fn insert(conn: &mut MySqlConnection, rows: &[NewRow<'_>]) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let json = serde_json::Value::Array(
        rows.iter()
            .map(|row| {
                serde_json::json!({
                    "event_id": row.event_id.to_string(),
                    "exchange": row.exchange,
                    "routing_key": row.routing_key,
                    "payload": row.payload,
                    "headers": row.headers,
                })
            })
            .collect(),
    )
    .to_string();
    sqlx::query!(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
         SELECT UNHEX(REPLACE(j.event_id, '-', '')), j.exchange, j.routing_key, j.payload, j.headers
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             event_id CHAR(36) PATH '$.event_id',
             exchange TEXT PATH '$.exchange',
             routing_key TEXT PATH '$.routing_key',
             payload JSON PATH '$.payload',
             headers JSON PATH '$.headers')) AS j
         ORDER BY j.n",
        json,
    )
    .execute(conn)
    .await
    .map(drop)
}

/// A row the sweep claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRow {
    pub event_id: Uuid,
    pub exchange: String,
    pub routing_key: String,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
    pub attempts: i32,
}

/// Whether any row is due for the sweep: pending, due, and tried before or `min_age` old.
pub async fn any_due(db: impl MySqlExecutor<'_>, min_age: Duration) -> sqlx::Result<bool> {
    let any = sqlx::query_scalar!(
        "SELECT EXISTS (SELECT 1 FROM outbox
            WHERE status = 'pending' AND next_attempt_at <= NOW(6)
              AND (attempts > 0 OR created_at <= NOW(6) - INTERVAL ? MICROSECOND)) AS `any!: bool`",
        micros(min_age),
    )
    .fetch_one(db)
    .await?;
    Ok(any)
}

/// Locks up to `limit` due rows no other transaction holds, oldest due first, in the
/// caller's transaction (`outbox_due` leads with `status`, so the scan stops at `limit`).
pub async fn claim(
    conn: &mut MySqlConnection,
    limit: i64,
    min_age: Duration,
) -> sqlx::Result<Vec<ClaimedRow>> {
    let rows = sqlx::query!(
        "SELECT event_id AS `event_id: Uuid`, exchange, routing_key, payload, headers, attempts
         FROM outbox
         WHERE status = 'pending' AND next_attempt_at <= NOW(6)
           AND (attempts > 0 OR created_at <= NOW(6) - INTERVAL ? MICROSECOND)
         ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
        micros(min_age),
        limit,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(ClaimedRow {
                event_id: row.event_id,
                exchange: row.exchange,
                routing_key: row.routing_key,
                payload: parse_json(&row.payload)?,
                headers: parse_json(&row.headers)?,
                attempts: row.attempts,
            })
        })
        .collect()
}

/// Marks the rows of `ids` still pending as sent, in one statement. Returns the rows it
/// matched (sqlx's driver counts matched rows, not changed ones; every matched row changes
/// here, since `sent_at` and `status` do).
///
/// `STRAIGHT_JOIN` reads the ids first and each row by its unique key: on a table whose
/// statistics say it is nearly empty, the optimiser would otherwise scan the pending rows.
pub async fn mark_sent(db: impl MySqlExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS j
         STRAIGHT_JOIN outbox AS o ON o.event_id = UNHEX(REPLACE(j.id, '-', ''))
         SET o.status = 'sent', o.sent_at = NOW(6), o.updated_at = NOW(6)
         WHERE o.status = 'pending'",
        json_ids(ids),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Records a failed publish of a pending row: its attempts, the error (cut to fit), when it
/// is due again, and `dead` at its last attempt.
pub async fn record_failure(
    db: impl MySqlExecutor<'_>,
    event_id: Uuid,
    attempts: i32,
    error: &str,
    delay: Duration,
    dead: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE outbox SET attempts = ?, last_error = ?, updated_at = NOW(6),
                next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND,
                status = CASE WHEN ? THEN 'dead' ELSE 'pending' END
         WHERE event_id = ? AND status = 'pending'",
        attempts,
        fitting_error(error),
        micros(delay),
        dead,
        event_id,
    )
    .execute(db)
    .await
    .map(drop)
}

/// The pending rows: how many, and how old the oldest is, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub pending: i64,
    pub oldest_secs: f64,
}

pub async fn backlog(db: impl MySqlExecutor<'_>) -> sqlx::Result<Backlog> {
    let row = sqlx::query!(
        "SELECT COUNT(*) AS `pending!: i64`,
                CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)), 0) AS DOUBLE)
                    / 1000000 AS `oldest!: f64`
         FROM outbox WHERE status = 'pending'",
    )
    .fetch_one(db)
    .await?;
    Ok(Backlog {
        pending: row.pending,
        oldest_secs: row.oldest,
    })
}

/// Deletes at most `batch` rows sent more than `keep` ago; how many it deleted.
pub async fn delete_sent_before(
    db: impl MySqlExecutor<'_>,
    keep: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM outbox WHERE status = 'sent' AND sent_at < NOW(6) - INTERVAL ? MICROSECOND
         ORDER BY sent_at LIMIT ?",
        micros(keep),
        batch,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
