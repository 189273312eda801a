//! The statements that end holds: [`confirm_all`], [`cancel_all`] (for a batch of ids, see
//! `super::batched`) and [`expire_due`], each one statement (its own transaction) that changes
//! a hold's state only from `HELD`, so a hold
//! is decided once whoever asks: a confirm, a cancel and the expiry racing each other wait on
//! the hold's row, and the later ones find it no longer `HELD`. The database's clock decides
//! whether a deadline has passed, the same clock for every instance. (A hold's try is written
//! by the group commit of `POST /deductions`: `crate::deductions::queries::record`.)
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`). On
//! MySQL, the statements of `inventory_mysql::holds`: several per call, in one transaction
//! opened and committed here (a savepoint inside the caller's), so each call is still all or
//! nothing and decides a hold once.

use chrono::{DateTime, Utc};
use platform::storage::Conn;
use sqlx::{Acquire, MySqlConnection};

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

impl From<inventory_mysql::holds::HoldRow> for HoldRow {
    fn from(row: inventory_mysql::holds::HoldRow) -> Self {
        Self {
            hold_id: row.hold_id,
            items: row.items,
            state: row.state,
            expires_at: row.expires_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            due: row.due,
            changed: row.changed,
        }
    }
}

/// The holds a MySQL end of `ids` left, in one transaction of its statements.
async fn ended_on_mysql(
    conn: &mut MySqlConnection,
    ids: &[&str],
    confirm: bool,
) -> sqlx::Result<Vec<HoldRow>> {
    let mut tx = conn.begin().await?;
    let rows = if confirm {
        inventory_mysql::holds::confirm_all(&mut tx, ids).await?
    } else {
        inventory_mysql::holds::cancel_all(&mut tx, ids).await?
    };
    tx.commit().await?;
    Ok(rows.into_iter().map(HoldRow::from).collect())
}

/// The hold `hold_id`, or `None` when no try and no cancel of it was ever recorded.
pub async fn find(conn: Conn<'_>, hold_id: &str) -> sqlx::Result<Option<HoldRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = inventory_mysql::holds::find(conn, hold_id).await?;
            return Ok(row.map(HoldRow::from));
        }
    };
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

/// Confirms every hold of `ids` that is `HELD` and whose deadline has not passed: its units
/// leave `held` for good (stock does not change, so no product's row is written). Returns
/// every hold of `ids` that exists, as the statement left it (`changed` for those it
/// confirmed). The holds are locked in ascending id first, so two batches never wait on each
/// other in a cycle; the expiry skips the holds locked here, and waits for none.
pub async fn confirm_all(conn: Conn<'_>, ids: &[&str]) -> sqlx::Result<Vec<HoldRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return ended_on_mysql(conn, ids, true).await,
    };
    sqlx::query_as!(
        HoldRow,
        r#"WITH locked AS MATERIALIZED (
               SELECT hold_id FROM holds WHERE hold_id = ANY($1) ORDER BY hold_id FOR UPDATE
           ), confirmed AS (
               UPDATE holds AS h SET state = 'CONFIRMED', updated_at = now()
                 FROM locked AS l
                WHERE h.hold_id = l.hold_id AND h.state = 'HELD' AND h.expires_at > now()
               RETURNING h.hold_id, h.items, h.state, h.expires_at, h.created_at, h.updated_at
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
             FROM holds
            WHERE hold_id = ANY($1) AND hold_id NOT IN (SELECT hold_id FROM confirmed)"#,
        ids as &[&str],
    )
    .fetch_all(conn)
    .await
}

/// Ends every hold of `ids` that is `HELD` — `CANCELLED`, or `EXPIRED` when its deadline has
/// passed — and gives their units back to stock (`give_back_held`, the one give-back path,
/// shared with the expiry: one update per product for the whole batch); leaves a tombstone
/// (`CANCELLED`, no items) for each id never tried, so a late try holds nothing. Returns every
/// hold of `ids` as the statement left it. An id missing from the answer had a try commit
/// while the statement ran: the caller runs it again.
pub async fn cancel_all(conn: Conn<'_>, ids: &[&str]) -> sqlx::Result<Vec<HoldRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return ended_on_mysql(conn, ids, false).await,
    };
    sqlx::query_as!(
        HoldRow,
        r#"WITH locked AS MATERIALIZED (
               SELECT hold_id FROM holds WHERE hold_id = ANY($1) ORDER BY hold_id FOR UPDATE
           ), ended AS (
               UPDATE holds AS h
                  SET state = CASE WHEN h.expires_at <= now() THEN 'EXPIRED' ELSE 'CANCELLED' END,
                      updated_at = now()
                 FROM locked AS l
                WHERE h.hold_id = l.hold_id AND h.state = 'HELD'
               RETURNING h.hold_id, h.items, h.state, h.expires_at, h.created_at, h.updated_at
           ), given AS (
               SELECT give_back_held(ARRAY(SELECT hold_id FROM ended)) AS products
           ), tombstones AS (
               INSERT INTO holds (hold_id, items, state)
               SELECT id, '[]'::jsonb, 'CANCELLED' FROM unnest($1::text[]) AS id
                WHERE NOT EXISTS (SELECT 1 FROM holds WHERE hold_id = id)
                   ON CONFLICT ON CONSTRAINT holds_pkey DO NOTHING
               RETURNING hold_id, items, state, expires_at, created_at, updated_at
           )
           SELECT hold_id AS "hold_id!", items AS "items!", state AS "state!", expires_at,
                  created_at AS "created_at!", updated_at AS "updated_at!",
                  coalesce(expires_at <= now(), false) AS "due!", true AS "changed!"
             FROM ended WHERE (SELECT products FROM given) >= 0
           UNION ALL
           SELECT hold_id, items, state, expires_at, created_at, updated_at, false, true
             FROM tombstones
           UNION ALL
           SELECT hold_id, items, state, expires_at, created_at, updated_at,
                  coalesce(expires_at <= now(), false), false
             FROM holds
            WHERE hold_id = ANY($1) AND hold_id NOT IN (SELECT hold_id FROM ended)
              AND hold_id NOT IN (SELECT hold_id FROM tombstones)"#,
        ids as &[&str],
    )
    .fetch_all(conn)
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
pub async fn expire_due(conn: Conn<'_>, limit: i64) -> sqlx::Result<Swept> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let mut tx = conn.begin().await?;
            let swept = inventory_mysql::holds::expire_due(&mut tx, limit).await?;
            tx.commit().await?;
            return Ok(Swept {
                expired: swept.expired,
                overdue: swept.overdue,
            });
        }
    };
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
pub async fn delete_finished(conn: Conn<'_>, keep_secs: f64, limit: i64) -> sqlx::Result<u64> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let keep = std::time::Duration::from_secs_f64(keep_secs);
            return inventory_mysql::holds::delete_finished(conn, keep, limit).await;
        }
    };
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
