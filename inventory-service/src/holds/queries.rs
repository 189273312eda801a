//! The statements that end a hold: [`confirm`], [`cancel`] and [`expire_due`], each one
//! statement (its own transaction) that changes the hold's state only from `HELD`, so a hold
//! is decided once whoever asks: a confirm, a cancel and the expiry racing each other wait on
//! the hold's row, and the later ones find it no longer `HELD`. The database's clock decides
//! whether a deadline has passed, the same clock for every instance. (A hold's try is written
//! by the group commit of `POST /deductions`: `crate::deductions::queries::record`.)
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// A hold as its row keeps it, with whether the database's clock has reached its deadline.
#[derive(Debug, Clone)]
pub struct HoldRow {
    pub hold_id: String,
    pub items: serde_json::Value,
    pub state: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `expires_at` is at or before the statement's `now()`.
    pub due: bool,
    /// This statement changed the hold (or wrote the tombstone).
    pub changed: bool,
}

/// The hold `hold_id`, or `None` when no try and no cancel of it was ever recorded.
pub async fn find(conn: &mut PgConnection, hold_id: &str) -> sqlx::Result<Option<HoldRow>> {
    sqlx::query_as!(
        HoldRow,
        r#"SELECT hold_id, items, state, expires_at, created_at, updated_at,
                  coalesce(expires_at <= now(), false) AS "due!", false AS "changed!"
             FROM holds WHERE hold_id = $1"#,
        hold_id,
    )
    .fetch_optional(conn)
    .await
}

/// Confirms `hold_id` if it is `HELD` and its deadline has not passed: its units leave
/// `held` for good (stock does not change, so the product's row is not written). Otherwise
/// changes nothing and returns the hold as it was (`None`: there is none).
pub async fn confirm(conn: &mut PgConnection, hold_id: &str) -> sqlx::Result<Option<HoldRow>> {
    sqlx::query_as!(
        HoldRow,
        r#"WITH confirmed AS (
               UPDATE holds SET state = 'CONFIRMED', updated_at = now()
                WHERE hold_id = $1 AND state = 'HELD' AND expires_at > now()
               RETURNING hold_id, items, state, expires_at, created_at, updated_at
           ), freed AS (
               DELETE FROM held_units AS u USING confirmed AS c WHERE u.hold_id = c.hold_id
           )
           SELECT hold_id AS "hold_id!", items AS "items!", state AS "state!", expires_at,
                  created_at AS "created_at!", updated_at AS "updated_at!", false AS "due!",
                  true AS "changed!"
             FROM confirmed
           UNION ALL
           SELECT hold_id, items, state, expires_at, created_at, updated_at,
                  coalesce(expires_at <= now(), false), false
             FROM holds WHERE hold_id = $1 AND NOT EXISTS (SELECT 1 FROM confirmed)"#,
        hold_id,
    )
    .fetch_optional(conn)
    .await
}

/// Ends `hold_id` if it is `HELD` — `CANCELLED`, or `EXPIRED` when its deadline has passed —
/// and gives its units back to stock; leaves a tombstone (`CANCELLED`, no items) when the
/// hold was never tried, so a late try holds nothing. Otherwise changes nothing and returns
/// the hold as it was. `None` only when a try of this id committed while the statement ran:
/// the caller runs it again.
pub async fn cancel(conn: &mut PgConnection, hold_id: &str) -> sqlx::Result<Option<HoldRow>> {
    // `give_back_held` (migration 0007) is the one give-back path, shared with the expiry.
    sqlx::query_as!(
        HoldRow,
        r#"WITH ended AS (
               UPDATE holds
                  SET state = CASE WHEN expires_at <= now() THEN 'EXPIRED' ELSE 'CANCELLED' END,
                      updated_at = now()
                WHERE hold_id = $1 AND state = 'HELD'
               RETURNING hold_id, items, state, expires_at, created_at, updated_at
           ), given AS (
               SELECT give_back_held(ARRAY(SELECT hold_id FROM ended)) AS products
           ), tombstone AS (
               INSERT INTO holds (hold_id, items, state)
               SELECT $1, '[]'::jsonb, 'CANCELLED'
                WHERE NOT EXISTS (SELECT 1 FROM holds WHERE hold_id = $1)
                   ON CONFLICT ON CONSTRAINT holds_pkey DO NOTHING
               RETURNING hold_id, items, state, expires_at, created_at, updated_at
           )
           SELECT hold_id AS "hold_id!", items AS "items!", state AS "state!", expires_at,
                  created_at AS "created_at!", updated_at AS "updated_at!",
                  coalesce(expires_at <= now(), false) AS "due!", true AS "changed!"
             FROM ended WHERE (SELECT products FROM given) >= 0
           UNION ALL
           SELECT hold_id, items, state, expires_at, created_at, updated_at, false, true
             FROM tombstone
           UNION ALL
           SELECT hold_id, items, state, expires_at, created_at, updated_at,
                  coalesce(expires_at <= now(), false), false
             FROM holds
            WHERE hold_id = $1 AND NOT EXISTS (SELECT 1 FROM ended)
              AND NOT EXISTS (SELECT 1 FROM tombstone)"#,
        hold_id,
    )
    .fetch_optional(conn)
    .await
}

/// What one expiry sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Holds this sweep moved to `EXPIRED`, their units back in stock.
    pub expired: i64,
    /// Holds that were due and are still `HELD` after it (beyond its batch, or being changed
    /// by someone else meanwhile).
    pub overdue: i64,
}

/// Expires up to `limit` holds whose deadline has passed, oldest first, skipping any that
/// another sweep, confirm or cancel holds right now (several instances sweep at once, each
/// taking its own), and gives their units back to stock (`give_back_held`, one update per
/// product).
pub async fn expire_due(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Swept> {
    let row = sqlx::query!(
        r#"WITH due AS (
               SELECT hold_id FROM holds
                WHERE state = 'HELD' AND expires_at <= now()
                ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
           ), expired AS (
               UPDATE holds AS h SET state = 'EXPIRED', updated_at = now()
                 FROM due WHERE h.hold_id = due.hold_id
               RETURNING h.hold_id
           ), given AS (
               SELECT give_back_held(ARRAY(SELECT hold_id FROM expired)) AS products
           )
           SELECT (SELECT count(*) FROM expired) AS "expired!",
                  (SELECT products FROM given) AS "products!",
                  (SELECT count(*) FROM holds WHERE state = 'HELD' AND expires_at <= now())
                      AS "due_before!""#,
        limit,
    )
    .fetch_one(conn)
    .await?;
    Ok(Swept {
        expired: row.expired,
        overdue: (row.due_before - row.expired).max(0),
    })
}

/// Deletes up to `limit` finished holds (and tombstones) last changed more than `keep_secs`
/// ago; returns how many. A finished hold has no units left in `held_units`.
pub async fn delete_finished(
    conn: &mut PgConnection,
    keep_secs: f64,
    limit: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM holds WHERE hold_id IN (
             SELECT hold_id FROM holds
              WHERE state <> 'HELD' AND updated_at < now() - make_interval(secs => $1)
              LIMIT $2)",
        keep_secs,
        limit,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
