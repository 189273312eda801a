//! The stock a batch of order events locks and reads (stock and version) and the conditional
//! update of what it decided ([`super::engine::Ledger::changes`]), which only changes a row
//! that is unchanged since the read and keeps its stock non-negative. (`POST /deductions` sends the same update inside its
//! one write statement, `crate::deductions::queries::record`.)
//!
//! This, not the Redis lock, is what keeps stock correct: a writer holding a stale read (a
//! lock holder paused past its TTL, two holders while Redis lost its keys, no lock at all
//! while Redis is down) updates no row, re-reads and decides again.
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use std::collections::HashSet;

use shared::ids::ProductId;
use sqlx::PgConnection;

/// A product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub stock: i64,
    pub version: i64,
}

/// The stock a batch of order events may change, locked for its transaction.
#[derive(Debug, Clone, Default)]
pub struct Locked {
    /// The products locked, with their stock and version: the batch may change these.
    pub rows: Vec<(ProductId, StockRow)>,
    /// Products that exist but another transaction holds: the work that needs one of them
    /// waits for a later batch.
    pub busy: HashSet<ProductId>,
}

/// Locks every product of `products` that exists and no other transaction holds, in
/// ascending id, for the rest of the caller's transaction, and reads their stock and version
/// (the latest committed). Waits for no row lock: a batch never stalls on one busy product (a
/// holder stuck in the database, paused with its transaction open); only the work needing it
/// waits. A product absent from both sets does not exist.
pub async fn lock_all(conn: &mut PgConnection, products: &[ProductId]) -> sqlx::Result<Locked> {
    let ids: Vec<i64> = products.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        r#"WITH locked AS MATERIALIZED (
               SELECT product_id, stock, version FROM products WHERE product_id = ANY($1)
                ORDER BY product_id FOR UPDATE SKIP LOCKED)
           SELECT p.product_id, l.stock AS "stock?", l.version AS "version?"
             FROM products AS p LEFT JOIN locked AS l USING (product_id)
            WHERE p.product_id = ANY($1)"#,
        &ids,
    )
    .fetch_all(conn)
    .await?;
    let mut locked = Locked::default();
    for row in rows {
        let id = ProductId(row.product_id);
        match (row.stock, row.version) {
            (Some(stock), Some(version)) => locked.rows.push((id, StockRow { stock, version })),
            _ => {
                locked.busy.insert(id);
            }
        }
    }
    Ok(locked)
}

/// A change of one product's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub product_id: ProductId,
    /// Added to the stock (negative for a deduction).
    pub delta: i64,
    /// The version the decision was based on; `None` for a give-back decided without reading
    /// the row (an increment cannot oversell, so it needs no lock and checks no version; the
    /// version bump makes a concurrent deduction re-read and retry).
    pub version: Option<i64>,
}

/// Every change in one statement: each row changes only if it still has the version it was
/// read at (when one is given) and its stock stays non-negative. A batch of order events
/// locked its rows with [`lock_all`] first, so this waits for no one. `false` when any row did
/// not match: the caller rolls back, since a decision it made was based on a row that moved.
pub async fn apply_changes(conn: &mut PgConnection, changes: &[Change]) -> sqlx::Result<bool> {
    if changes.is_empty() {
        return Ok(true);
    }
    let mut sorted = changes.to_vec();
    sorted.sort_by_key(|c| c.product_id);
    let ids: Vec<i64> = sorted.iter().map(|c| c.product_id.0).collect();
    let deltas: Vec<i64> = sorted.iter().map(|c| c.delta).collect();
    let versions: Vec<Option<i64>> = sorted.iter().map(|c| c.version).collect();
    let done = sqlx::query!(
        "UPDATE products p SET stock = p.stock + c.delta, version = p.version + 1, updated_at = now()
         FROM (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
               AS c(product_id, delta, version) ORDER BY product_id) AS c
         WHERE p.product_id = c.product_id
           AND (c.version IS NULL OR p.version = c.version) AND p.stock + c.delta >= 0",
        &ids,
        &deltas,
        &versions as &[Option<i64>],
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == changes.len() as u64)
}
