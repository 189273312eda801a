//! The statements every writer of stock shares: the products locked in ascending id, the
//! versions a batch was judged at checked, the conditional update of stock, and the give-back
//! of ended holds' units (PostgreSQL's `give_back_held`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::MySqlConnection;

use crate::{ascending, json_array, serialization_failure};

/// A product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub stock: i64,
    pub version: i64,
}

/// A change of one product's stock, as the stock engine decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub product_id: i64,
    /// Added to the stock (negative for a deduction).
    pub delta: i64,
    /// The version the decision was based on; `None` for a give-back decided without reading
    /// the row (an increment cannot oversell, so it checks no version).
    pub version: Option<i64>,
}

/// Locks the products of `ids` that exist, in ascending id, waiting for each (up to the
/// session's lock wait): their stock and version, which nobody else changes until the
/// transaction ends.
pub(crate) async fn lock_products(
    conn: &mut MySqlConnection,
    ids: &[i64],
) -> sqlx::Result<BTreeMap<i64, StockRow>> {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    // The ids ascending, STRAIGHT_JOIN: each row is read, and locked, by primary key in the
    // array's order.
    let rows = sqlx::query!(
        "SELECT p.product_id, p.stock, p.version
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = j.id
         FOR UPDATE",
        json_array(ascending(ids).into_iter().map(serde_json::Value::from)),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let stock = StockRow {
                stock: row.stock,
                version: row.version,
            };
            (row.product_id, stock)
        })
        .collect())
}

/// Fails with a serialization failure unless every product of `judged` still has the version
/// it was judged at (one read; the write that follows checks the versions of what it changes
/// again, on the locked rows).
pub(crate) async fn check_judged(
    conn: &mut MySqlConnection,
    judged: &[(i64, StockRow)],
) -> sqlx::Result<()> {
    if judged.is_empty() {
        return Ok(());
    }
    let pairs = json_array(
        judged
            .iter()
            .map(|(id, row)| serde_json::json!({ "id": id, "version": row.version })),
    );
    let same = sqlx::query_scalar!(
        "SELECT COUNT(*) AS `same!: i64`
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id',
                                            version BIGINT PATH '$.version')) AS j
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = j.id AND p.version = j.version",
        pairs,
    )
    .fetch_one(&mut *conn)
    .await?;
    if usize::try_from(same).ok() != Some(judged.len()) {
        return Err(serialization_failure(
            "a product moved since the batch was judged",
        ));
    }
    Ok(())
}

/// Writes `changes`, each with `extra` units added past its guard (a cancel's give-back, which
/// can only add): the stock becomes `stock + delta + extra`, the version is bumped, but only
/// where the product still has the version the change was decided at (when it has one) and
/// `stock + delta` stays non-negative. Fails with a serialization failure unless every change
/// found its product so: then the caller's transaction must be rolled back.
///
/// The count is the rows the `WHERE` matched (`CLIENT_FOUND_ROWS`), and every matched row
/// changes (its version), so it is the rows written. The changes are written in ascending
/// product id, the order the rows are locked in.
pub(crate) async fn apply_changes(
    conn: &mut MySqlConnection,
    changes: &[(Change, i64)],
    at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut sorted = changes.to_vec();
    sorted.sort_by_key(|(change, _)| change.product_id);
    // A change without a version leaves the key out, which `JSON_TABLE` reads as NULL.
    let json = json_array(sorted.iter().map(|(change, extra)| {
        let mut row = serde_json::json!({
            "id": change.product_id,
            "delta": change.delta,
            "extra": extra,
        });
        if let Some(version) = change.version {
            row["version"] = version.into();
        }
        row
    }));
    let done = sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
             id BIGINT PATH '$.id',
             delta BIGINT PATH '$.delta',
             version BIGINT PATH '$.version',
             extra BIGINT PATH '$.extra')) AS c
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = c.id
         SET p.stock = p.stock + c.delta + c.extra, p.version = p.version + 1,
             p.updated_at = COALESCE(?, UTC_TIMESTAMP(6))
         WHERE (c.version IS NULL OR p.version = c.version) AND p.stock + c.delta >= 0",
        json,
        at,
    )
    .execute(&mut *conn)
    .await?;
    if usize::try_from(done.rows_affected()).ok() != Some(changes.len()) {
        return Err(serialization_failure(
            "a product's stock moved since it was read",
        ));
    }
    Ok(())
}

/// The units of `holds` (ended by the caller, which holds their rows), summed per product,
/// locked; each `(hold_id, product_id, quantity)` row is returned as well.
pub(crate) async fn units_of(
    conn: &mut MySqlConnection,
    holds: &[&str],
) -> sqlx::Result<Vec<(String, i64, i64)>> {
    if holds.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        "SELECT u.hold_id, u.product_id, u.quantity
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS j
         STRAIGHT_JOIN held_units AS u FORCE INDEX (PRIMARY) ON u.hold_id = j.id
         FOR UPDATE",
        crate::json_texts(&ascending(holds)),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.hold_id, row.product_id, row.quantity))
        .collect())
}

/// Deletes the units of `holds`.
pub(crate) async fn delete_units(conn: &mut MySqlConnection, holds: &[&str]) -> sqlx::Result<()> {
    if holds.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "DELETE u FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS j
         STRAIGHT_JOIN held_units AS u FORCE INDEX (PRIMARY) ON u.hold_id = j.id",
        crate::json_texts(&ascending(holds)),
    )
    .execute(&mut *conn)
    .await
    .map(drop)
}

/// PostgreSQL's `give_back_held(holds)`: deletes the units of `holds` and adds each product's
/// sum of them back to its stock (version + 1, `updated_at` = `at`), the products locked in
/// ascending id, as every writer of stock locks them. Returns how many products changed. The
/// caller has ended the holds, and holds their rows.
pub(crate) async fn give_back_held(
    conn: &mut MySqlConnection,
    holds: &[&str],
    at: DateTime<Utc>,
) -> sqlx::Result<u64> {
    let units = units_of(conn, holds).await?;
    if units.is_empty() {
        return Ok(0);
    }
    delete_units(conn, holds).await?;
    let mut back: BTreeMap<i64, i64> = BTreeMap::new();
    for (_, product_id, quantity) in &units {
        *back.entry(*product_id).or_default() += quantity;
    }
    // Ascending product id, STRAIGHT_JOIN: the rows are locked in that order. No guard: an
    // increment cannot oversell, and the version bump makes a deduction that read the row
    // before it read again.
    let done = sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id',
                                              quantity BIGINT PATH '$.quantity')) AS b
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = b.id
         SET p.stock = p.stock + b.quantity, p.version = p.version + 1, p.updated_at = ?",
        json_array(
            back.iter()
                .map(|(id, quantity)| serde_json::json!({ "id": id, "quantity": quantity })),
        ),
        at,
    )
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}
