//! The stock a batch reads (stock and version) and the conditional update of what it decided
//! ([`super::engine::Ledger::changes`]), which only changes a row that is unchanged since the
//! read and keeps its stock non-negative. (`POST /deductions` sends the same update inside its
//! one write statement, `crate::deductions::queries::record`.)
//!
//! This, not the Redis lock, is what keeps stock correct: a writer holding a stale read (a
//! lock holder paused past its TTL, two holders while Redis lost its keys, no lock at all
//! while Redis is down) updates no row, re-reads and decides again.
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use shared::ids::ProductId;
use sqlx::PgConnection;

/// A product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub stock: i64,
    pub version: i64,
}

/// The stock and version of every product of `products` that exists.
pub async fn read_all(
    conn: &mut PgConnection,
    products: &[ProductId],
) -> sqlx::Result<Vec<(ProductId, StockRow)>> {
    let ids: Vec<i64> = products.iter().map(|p| p.0).collect();
    let rows = sqlx::query!(
        "SELECT product_id, stock, version FROM products WHERE product_id = ANY($1)",
        &ids,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let (stock, version) = (row.stock, row.version);
            (ProductId(row.product_id), StockRow { stock, version })
        })
        .collect())
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
/// read at (when one is given) and its stock stays non-negative. One statement for all the
/// rows (two statements could take two rows' locks in opposite orders to another writer's),
/// fed in ascending product id like every deduction. `false` when any row did not match: the caller rolls back, since a decision it made was
/// based on a row that moved.
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
