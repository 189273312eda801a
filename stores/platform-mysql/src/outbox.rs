//! The outbox: rows written with the change they announce, claimed and settled by the
//! relay's sweep, marked sent in batches, counted for the backlog gauges, deleted once sent
//! and old. The MySQL forms of `platform::messaging::outbox` and the relay's PostgreSQL store.
//!
//! Every write the relay makes is guarded by `status = 'pending'`: a row an operator or
//! another relay settled meanwhile is left as it is.

use std::time::Duration;

use sqlx::{MySqlConnection, MySqlExecutor};
use uuid::Uuid;

use crate::{fitting_error, json_ids, micros};

/// A row to write.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    pub event_id: Uuid,
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub payload: &'a serde_json::Value,
    pub headers: &'a serde_json::Value,
}

/// Writes every row in one statement (inside the caller's transaction), their ids ascending
/// in the order given, so the sweep publishes them in that order. Nothing for no rows.
///
/// MySQL has no array parameters, and a `VALUES` list of a variable length cannot be a
/// checked statement: the rows travel as one JSON array, read back as rows by `JSON_TABLE`.
/// `INSERT … SELECT … ORDER BY` inserts (and numbers) rows in that order, and the order is
/// the array's, `FOR ORDINALITY`. The whole array is one parameter, so a batch must fit in
/// the server's `max_allowed_packet`, as a `VALUES` list would.
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
    // A `JSON` column of `JSON_TABLE` takes the value at its path as JSON text (an object,
    // an array, a scalar or `null`); a `TEXT` one takes a string's value, unescaped.
    sqlx::query!(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
         SELECT UNHEX(REPLACE(r.event_id, '-', '')), r.exchange, r.routing_key, r.payload,
                r.headers
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             event_id CHAR(36) PATH '$.event_id',
             exchange TEXT PATH '$.exchange',
             routing_key TEXT PATH '$.routing_key',
             payload JSON PATH '$.payload',
             headers JSON PATH '$.headers')) AS r
         ORDER BY r.n",
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

/// Whether any row is due for the sweep: pending, `next_attempt_at` passed, and either tried
/// before or at least `min_age` old. One autocommit statement, run while there is usually
/// nothing to find.
///
/// `FORCE INDEX (outbox_due)`: this runs at every poll, and finds nothing most of the time,
/// which is when a full scan (the optimiser's guess when it takes `status = 'pending'` for a
/// third of the table) would read every sent row kept.
pub async fn any_due(db: impl MySqlExecutor<'_>, min_age: Duration) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        "SELECT EXISTS (SELECT 1 FROM outbox FORCE INDEX (outbox_due)
            WHERE status = 'pending' AND next_attempt_at <= NOW(6)
              AND (attempts > 0 OR created_at <= NOW(6) - INTERVAL ? MICROSECOND))
         AS `any!: bool`",
        micros(min_age),
    )
    .fetch_one(db)
    .await
}

/// Locks up to `limit` due rows (as [`any_due`] means it) that no other transaction holds,
/// earliest due first, in the caller's transaction; the locks are the claim, released when
/// the caller commits.
///
/// `FORCE INDEX (outbox_due)`, `(status, next_attempt_at, id)`: read in that index's order,
/// the scan stops after `limit` rows. Any other plan sorts what it read, and a locking read
/// locks every row it reads before the sort: one relay would hold all due rows and the others'
/// `SKIP LOCKED` would find none.
pub async fn claim(
    conn: &mut MySqlConnection,
    limit: i64,
    min_age: Duration,
) -> sqlx::Result<Vec<ClaimedRow>> {
    sqlx::query_as!(
        ClaimedRow,
        "SELECT event_id AS `event_id: Uuid`, exchange, routing_key,
                payload AS `payload: serde_json::Value`, headers AS `headers: serde_json::Value`,
                attempts
         FROM outbox FORCE INDEX (outbox_due)
         WHERE status = 'pending' AND next_attempt_at <= NOW(6)
           AND (attempts > 0 OR created_at <= NOW(6) - INTERVAL ? MICROSECOND)
         ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
        micros(min_age),
        limit,
    )
    .fetch_all(conn)
    .await
}

/// Marks the rows of `ids` that are still pending as sent, in one statement. Returns how many
/// of `ids` were pending (and are now sent): the driver counts the rows the `WHERE` matched,
/// not the rows changed, and here every matched row changes. A row already sent or dead, or
/// an unknown id, is not counted; an id given twice counts once.
///
/// `STRAIGHT_JOIN` reads the ids first and each row by its unique key (`outbox_event_id_key`).
/// Left to itself the optimiser may start from `outbox` by `status = 'pending'` (its guess
/// for a small table, or for `status` in general) and read, and lock, every pending row,
/// waiting on those a sweep holds.
pub async fn mark_sent(db: impl MySqlExecutor<'_>, ids: &[Uuid]) -> sqlx::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS s
         STRAIGHT_JOIN outbox AS o FORCE INDEX (outbox_event_id_key) ON o.event_id = UNHEX(REPLACE(s.id, '-', ''))
         SET o.status = 'sent', o.sent_at = NOW(6), o.updated_at = NOW(6)
         WHERE o.status = 'pending'",
        json_ids(ids),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Records a failed publish of a pending row: its attempts so far, the error (cut to
/// [`crate::MAX_ERROR_BYTES`]), when it is due again (`delay` from now), and `dead` after its
/// last attempt. A row no longer pending is left as it is.
///
/// `delay` must keep the date inside `DATETIME`'s range (year 9999): past it the date is NULL,
/// which `next_attempt_at` refuses.
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

/// The pending rows: how many, and how old the oldest is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub pending: i64,
    /// Seconds since the oldest pending row was written; 0 when none is pending.
    pub oldest_secs: f64,
}

/// The backlog gauges' reading, every second: `FORCE INDEX (outbox_due)` so that it reads
/// the pending rows only, never a scan of the sent rows kept (see [`any_due`]).
pub async fn backlog(db: impl MySqlExecutor<'_>) -> sqlx::Result<Backlog> {
    let row = sqlx::query!(
        "SELECT COUNT(*) AS `pending!: i64`,
                CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)), 0) AS DOUBLE)
                    / 1000000 AS `oldest!: f64`
         FROM outbox FORCE INDEX (outbox_due) WHERE status = 'pending'",
    )
    .fetch_one(db)
    .await?;
    Ok(Backlog {
        pending: row.pending,
        oldest_secs: row.oldest,
    })
}

/// Deletes at most `batch` rows sent more than `keep` ago, oldest first; how many it deleted.
///
/// Not the single-table `DELETE … ORDER BY sent_at LIMIT ?`: MariaDB plans that one with
/// `outbox_dead` `(status, id)` and a sort whenever it takes the old sent rows for many
/// (measured: 10,000 rows read and sorted to delete 100), every batch again. The ids are
/// picked from `outbox_sent` `(status, sent_at)` in order, reading `batch` entries, then
/// deleted by primary key; the outer `WHERE` is checked again on each locked row, so a row
/// an operator sent again in between is kept.
pub async fn delete_sent_before(
    db: impl MySqlExecutor<'_>,
    keep: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE o FROM outbox AS o
         JOIN (SELECT id FROM outbox FORCE INDEX (outbox_sent)
               WHERE status = 'sent' AND sent_at < NOW(6) - INTERVAL ? MICROSECOND
               ORDER BY sent_at LIMIT ?) AS old ON o.id = old.id
         WHERE o.status = 'sent' AND o.sent_at < NOW(6) - INTERVAL ? MICROSECOND",
        micros(keep),
        batch,
        micros(keep),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
