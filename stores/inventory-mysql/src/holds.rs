//! The statements that end holds: [`confirm_all`], [`cancel_all`] (a batch of ids each) and
//! [`expire_due`], each changing a hold's state only from `HELD`, so a hold is decided once
//! whoever asks: a confirm, a cancel and the expiry racing each other wait on the hold's row
//! (or, the expiry, skip it), and the later ones find it no longer `HELD`. The database's
//! clock decides whether a deadline has passed, the same clock for every instance: one reading
//! per call, as PostgreSQL's `now()` is one per statement. A hold's try is written by
//! [`crate::deductions::record`]. The MySQL forms of `inventory_service::holds::queries`.
//!
//! Each function runs several statements, inside the caller's transaction; the holds' row
//! locks taken first keep every other writer of those holds waiting until it commits.

use std::time::Duration;

use chrono::{DateTime, Utc};
use platform_mysql::micros;
use sqlx::MySqlConnection;

use crate::stock::{delete_units, give_back_held};
use crate::{ascending, is_duplicate, json_array, json_texts, serialization_failure};

/// A hold as its row keeps it, with whether the database's clock has reached its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldRow {
    pub hold_id: String,
    pub items: serde_json::Value,
    pub state: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `expires_at` is at or before the call's clock reading.
    pub due: bool,
    /// This call changed the hold (or wrote the tombstone).
    pub changed: bool,
}

/// The hold `hold_id`, or `None` when no try and no cancel of it was ever recorded.
/// PostgreSQL: `holds::queries::find`.
pub async fn find(conn: &mut MySqlConnection, hold_id: &str) -> sqlx::Result<Option<HoldRow>> {
    sqlx::query_as!(
        HoldRow,
        "SELECT hold_id, items AS `items: serde_json::Value`, state,
                expires_at AS `expires_at: DateTime<Utc>`,
                created_at AS `created_at: DateTime<Utc>`,
                updated_at AS `updated_at: DateTime<Utc>`,
                COALESCE(expires_at <= UTC_TIMESTAMP(6), FALSE) AS `due!: bool`,
                FALSE AS `changed!: bool`
         FROM holds WHERE hold_id = ?",
        hold_id,
    )
    .fetch_optional(conn)
    .await
}

/// The database's clock, once for a whole call: what PostgreSQL's `now()` is to a statement.
pub async fn clock(conn: &mut MySqlConnection) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar!("SELECT UTC_TIMESTAMP(6) AS `at!: DateTime<Utc>`")
        .fetch_one(conn)
        .await
}

/// Locks the holds of `ids` (ascending, once each) that exist, in that order, waiting for
/// each; or, with `skip_locked`, skipping any another transaction holds. Each is returned as
/// it is, unchanged, `due` by `at`.
pub(crate) async fn lock_holds(
    conn: &mut MySqlConnection,
    ids: &[&str],
    skip_locked: bool,
    at: DateTime<Utc>,
) -> sqlx::Result<Vec<HoldRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids = json_texts(&ascending(ids));
    // STRAIGHT_JOIN from the ascending ids: each hold read, and locked, by primary key in that
    // order. Two statements, since `SKIP LOCKED` is not a parameter.
    let rows = if skip_locked {
        sqlx::query_as!(
            HoldRow,
            "SELECT h.hold_id, h.items AS `items: serde_json::Value`, h.state,
                    h.expires_at AS `expires_at: DateTime<Utc>`,
                    h.created_at AS `created_at: DateTime<Utc>`,
                    h.updated_at AS `updated_at: DateTime<Utc>`,
                    FALSE AS `due!: bool`, FALSE AS `changed!: bool`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS j
             STRAIGHT_JOIN holds AS h FORCE INDEX (PRIMARY) ON h.hold_id = j.id
             FOR UPDATE SKIP LOCKED",
            ids,
        )
        .fetch_all(&mut *conn)
        .await?
    } else {
        sqlx::query_as!(
            HoldRow,
            "SELECT h.hold_id, h.items AS `items: serde_json::Value`, h.state,
                    h.expires_at AS `expires_at: DateTime<Utc>`,
                    h.created_at AS `created_at: DateTime<Utc>`,
                    h.updated_at AS `updated_at: DateTime<Utc>`,
                    FALSE AS `due!: bool`, FALSE AS `changed!: bool`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS j
             STRAIGHT_JOIN holds AS h FORCE INDEX (PRIMARY) ON h.hold_id = j.id
             FOR UPDATE",
            ids,
        )
        .fetch_all(&mut *conn)
        .await?
    };
    Ok(rows
        .into_iter()
        .map(|row| HoldRow {
            due: row.expires_at.is_some_and(|deadline| deadline <= at),
            ..row
        })
        .collect())
}

/// Moves each hold of `ended` (locked by the caller, `HELD`) to its new state, stamped `at`.
/// Every one of them changes (its state), so the count of rows matched is the count
/// changed; one short means a hold left `HELD` under the caller's lock, which cannot be, and
/// is refused as a serialization failure rather than trusted.
pub(crate) async fn set_states(
    conn: &mut MySqlConnection,
    ended: &[(&str, &str)],
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    if ended.is_empty() {
        return Ok(());
    }
    let mut sorted = ended.to_vec();
    sorted.sort_unstable();
    let json = json_array(
        sorted
            .iter()
            .map(|(id, state)| serde_json::json!({ "id": id, "state": state })),
    );
    let done = sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$.id',
                                              state TEXT PATH '$.state')) AS s
         STRAIGHT_JOIN holds AS h FORCE INDEX (PRIMARY) ON h.hold_id = s.id
         SET h.state = s.state, h.updated_at = ?
         WHERE h.state = 'HELD'",
        json,
        at,
    )
    .execute(&mut *conn)
    .await?;
    if usize::try_from(done.rows_affected()).ok() != Some(sorted.len()) {
        return Err(serialization_failure("a hold left HELD under its lock"));
    }
    Ok(())
}

/// `row` as an end left it: `state`, stamped `at`, changed.
pub(crate) fn ended(row: HoldRow, state: &str, at: DateTime<Utc>) -> HoldRow {
    HoldRow {
        state: state.to_owned(),
        updated_at: at,
        changed: true,
        ..row
    }
}

/// Confirms every hold of `ids` that is `HELD` and whose deadline has not passed: its units
/// leave `held_units` for good (stock does not change, so no product's row is written).
/// Returns every hold of `ids` that exists, as the call left it (`changed` for those it
/// confirmed, which are never `due`). The holds are locked in ascending id first, so two
/// batches never wait on each other in a cycle; the expiry skips the holds locked here.
/// PostgreSQL: `holds::queries::confirm_all`.
pub async fn confirm_all(conn: &mut MySqlConnection, ids: &[&str]) -> sqlx::Result<Vec<HoldRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let at = clock(conn).await?;
    let locked = lock_holds(conn, ids, false, at).await?;
    let confirmed: Vec<(&str, &str)> = locked
        .iter()
        .filter(|h| h.state == "HELD" && h.expires_at.is_some_and(|deadline| deadline > at))
        .map(|h| (h.hold_id.as_str(), "CONFIRMED"))
        .collect();
    set_states(conn, &confirmed, at).await?;
    let confirmed_ids: Vec<&str> = confirmed.iter().map(|(id, _)| *id).collect();
    delete_units(conn, &confirmed_ids).await?;
    let confirmed_ids: Vec<String> = confirmed_ids.into_iter().map(str::to_owned).collect();
    Ok(locked
        .into_iter()
        .map(|row| {
            if confirmed_ids.contains(&row.hold_id) {
                HoldRow {
                    due: false,
                    ..ended(row, "CONFIRMED", at)
                }
            } else {
                row
            }
        })
        .collect())
}

/// Ends every hold of `ids` that is `HELD` — `CANCELLED`, or `EXPIRED` when its deadline has
/// passed — and gives their units back to stock (one update per product for the whole batch,
/// the products locked in ascending id); leaves a tombstone (`CANCELLED`, items `[]`) for
/// each id never tried, so a late try holds nothing. Returns every hold of `ids` as the call
/// left it. An id missing from the answer had a try or a cancel commit its row between this
/// call's lock and its tombstone: the caller runs it again. PostgreSQL:
/// `holds::queries::cancel_all` (with `give_back_held`).
///
/// Locks: the holds (ascending id), their units, the products (ascending id), then the
/// tombstones' keys, last, so that a cancel never holds a tombstone's key while it waits for a
/// product whose batch is writing that hold's try.
pub async fn cancel_all(conn: &mut MySqlConnection, ids: &[&str]) -> sqlx::Result<Vec<HoldRow>> {
    let ids = ascending(ids);
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let at = clock(conn).await?;
    let locked = lock_holds(conn, &ids, false, at).await?;
    let ending: Vec<(&str, &str)> = locked
        .iter()
        .filter(|h| h.state == "HELD")
        .map(|h| {
            let state = if h.due { "EXPIRED" } else { "CANCELLED" };
            (h.hold_id.as_str(), state)
        })
        .collect();
    set_states(conn, &ending, at).await?;
    let ending_ids: Vec<&str> = ending.iter().map(|(id, _)| *id).collect();
    give_back_held(conn, &ending_ids, at).await?;
    let ending: Vec<(String, &str)> = ending
        .into_iter()
        .map(|(id, state)| (id.to_owned(), state))
        .collect();
    let mut rows: Vec<HoldRow> = locked
        .into_iter()
        .map(
            |row| match ending.iter().find(|(id, _)| *id == row.hold_id) {
                Some((_, state)) => ended(row, state, at),
                None => row,
            },
        )
        .collect();
    for id in ids {
        if rows.iter().any(|row| row.hold_id == id) {
            continue;
        }
        if let Some(tombstone) = insert_tombstone(conn, id, at).await? {
            rows.push(tombstone);
        }
    }
    Ok(rows)
}

/// Writes the tombstone of `hold_id`, stamped `at`; `None` when a row of that id was
/// committed since the caller looked (PostgreSQL's `ON CONFLICT ON CONSTRAINT holds_pkey DO
/// NOTHING`). One statement per id: a duplicate fails its whole statement, and with one row a
/// statement it fails that row only, and exactly (a skipped row of `ON DUPLICATE KEY UPDATE`
/// counts as an inserted one).
async fn insert_tombstone(
    conn: &mut MySqlConnection,
    hold_id: &str,
    at: DateTime<Utc>,
) -> sqlx::Result<Option<HoldRow>> {
    let inserted = sqlx::query!(
        "INSERT INTO holds (hold_id, items, state, created_at, updated_at)
         VALUES (?, '[]', 'CANCELLED', ?, ?)",
        hold_id,
        at,
        at,
    )
    .execute(&mut *conn)
    .await;
    match inserted {
        Ok(_) => Ok(Some(HoldRow {
            hold_id: hold_id.to_owned(),
            items: serde_json::json!([]),
            state: "CANCELLED".to_owned(),
            expires_at: None,
            created_at: at,
            updated_at: at,
            due: false,
            changed: true,
        })),
        Err(error) if is_duplicate(&error, "PRIMARY") => Ok(None),
        Err(error) => Err(error),
    }
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

/// Expires up to `limit` holds whose deadline has passed, oldest deadline first, skipping any
/// that another sweep, confirm or cancel holds right now (several instances sweep at once,
/// each taking its own), and gives their units back to stock. PostgreSQL:
/// `holds::queries::expire_due`.
///
/// `FORCE INDEX (holds_due_idx)`, `(state, expires_at)`: the due holds are read in deadline
/// order and the scan stops after `limit`; any other plan sorts what it read, and a locking
/// read locks every row it read before the sort.
pub async fn expire_due(conn: &mut MySqlConnection, limit: i64) -> sqlx::Result<Swept> {
    let at = clock(conn).await?;
    let due = sqlx::query_scalar!(
        "SELECT hold_id FROM holds FORCE INDEX (holds_due_idx)
         WHERE state = 'HELD' AND expires_at <= ?
         ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED",
        at,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let expiring: Vec<(&str, &str)> = due.iter().map(|id| (id.as_str(), "EXPIRED")).collect();
    set_states(conn, &expiring, at).await?;
    let ids: Vec<&str> = due.iter().map(String::as_str).collect();
    give_back_held(conn, &ids, at).await?;
    // Read after this sweep's own changes: the due holds left `HELD`.
    let overdue = sqlx::query_scalar!(
        "SELECT COUNT(*) AS `overdue!: i64` FROM holds FORCE INDEX (holds_due_idx)
         WHERE state = 'HELD' AND expires_at <= ?",
        at,
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Swept {
        expired: i64::try_from(due.len()).unwrap_or(i64::MAX),
        overdue,
    })
}

/// Deletes up to `limit` finished holds (and tombstones) last changed more than `keep` ago;
/// returns how many. A finished hold has no units left in `held_units`. PostgreSQL:
/// `holds::queries::delete_finished` (`keep_secs` there).
///
/// The finished states are named rather than `state <> 'HELD'`: `holds_finished_idx`
/// `(state, updated_at)` then reads a range of `updated_at` within each.
pub async fn delete_finished(
    conn: &mut MySqlConnection,
    keep: Duration,
    limit: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM holds
         WHERE state IN ('CONFIRMED', 'CANCELLED', 'EXPIRED', 'REFUSED')
           AND updated_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
         LIMIT ?",
        micros(keep),
        limit,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
