//! The deduction engine's SQL: read stock and version, then a conditional update that only
//! succeeds when the row is unchanged since the read and holds enough stock.
//!
//! This, not the Redis lock, is what keeps stock correct: a writer holding a stale read (a
//! lock holder paused past its TTL, two holders while Redis lost its keys, no lock at all
//! while Redis is down) updates no row, re-reads and decides again.

use shared::events::{LineItem, RejectionReason};
use shared::ids::ProductId;
use sqlx::{Connection, PgConnection};

use crate::domain::deduction::Outcome;
use crate::metrics;

/// Re-reads after a lost race before [`StockError::Contended`] (so 1 + this many tries).
pub const MAX_VERSION_RETRIES: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum StockError {
    /// The row kept changing between read and update; roll back, back off and try again.
    #[error("the stock of product {0} kept changing under the conditional update")]
    Contended(ProductId),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StockRow {
    pub stock: i64,
    pub version: i64,
}

pub async fn read(conn: &mut PgConnection, product: ProductId) -> sqlx::Result<Option<StockRow>> {
    sqlx::query_as::<_, StockRow>("SELECT stock, version FROM products WHERE product_id = $1")
        .bind(product.0)
        .fetch_optional(conn)
        .await
}

/// The conditional update: deducts `quantity` only if the row still has `version` and at
/// least `quantity` in stock. `false` when no row matched (changed since read, or short).
pub async fn try_deduct(
    conn: &mut PgConnection,
    product: ProductId,
    quantity: i64,
    version: i64,
) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "UPDATE products SET stock = stock - $2, version = version + 1, updated_at = now() \
         WHERE product_id = $1 AND stock >= $2 AND version = $3",
    )
    .bind(product.0)
    .bind(quantity)
    .bind(version)
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Deducts one item: `None` when deducted, `Some(reason)` when it cannot be.
pub async fn deduct_one(
    conn: &mut PgConnection,
    item: LineItem,
) -> Result<Option<RejectionReason>, StockError> {
    for _ in 0..=MAX_VERSION_RETRIES {
        let Some(row) = read(conn, item.product_id).await? else {
            return Ok(Some(RejectionReason::UnknownProduct));
        };
        if row.stock < item.quantity {
            return Ok(Some(RejectionReason::InsufficientStock));
        }
        if try_deduct(conn, item.product_id, item.quantity, row.version).await? {
            return Ok(None);
        }
        metrics::version_conflict();
    }
    Err(StockError::Contended(item.product_id))
}

/// Deducts every item, in ascending product id, all or nothing.
///
/// Runs inside a savepoint of the caller's transaction: a rejection undoes the items already
/// deducted, yet the caller can still write its own rows (the outcome, an outbox row) in the
/// same transaction and commit them. On `Err` the caller must roll back.
pub async fn deduct_all(
    conn: &mut PgConnection,
    items: &[LineItem],
) -> Result<Outcome, StockError> {
    if let [item] = items {
        // One item: a rejection has written nothing, so no savepoint is needed to undo it.
        return Ok(match deduct_one(conn, *item).await? {
            None => Outcome::Applied,
            Some(reason) => Outcome::Rejected {
                reason,
                product_id: item.product_id,
            },
        });
    }
    let mut sorted = items.to_vec();
    sorted.sort_by_key(|item| item.product_id);
    let mut savepoint = conn.begin().await?;
    for item in sorted {
        if let Some(reason) = deduct_one(&mut savepoint, item).await? {
            savepoint.rollback().await?;
            return Ok(Outcome::Rejected {
                reason,
                product_id: item.product_id,
            });
        }
    }
    savepoint.commit().await?;
    Ok(Outcome::Applied)
}

/// Gives `items` back (a cancelled order's compensation). An increment cannot oversell, so
/// it takes no lock; the version bump makes a concurrent deduction re-read and retry.
pub async fn give_back(conn: &mut PgConnection, items: &[LineItem]) -> sqlx::Result<()> {
    // Ascending product id, like every deduction, so two writers never deadlock on rows.
    let mut sorted = items.to_vec();
    sorted.sort_by_key(|item| item.product_id);
    for item in &sorted {
        sqlx::query(
            "UPDATE products SET stock = stock + $2, version = version + 1, updated_at = now() \
             WHERE product_id = $1",
        )
        .bind(item.product_id.0)
        .bind(item.quantity)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The first item (in ascending product id) the current stock cannot cover, read without any
/// lock. A rejection needs no lock: it deducts nothing, and it is true of the stock as read.
pub async fn first_shortfall(
    conn: &mut PgConnection,
    items: &[LineItem],
) -> sqlx::Result<Option<(RejectionReason, ProductId)>> {
    let ids: Vec<i64> = items.iter().map(|i| i.product_id.0).collect();
    let rows: Vec<(i64, i64)> =
        sqlx::query_as("SELECT product_id, stock FROM products WHERE product_id = ANY($1)")
            .bind(&ids)
            .fetch_all(conn)
            .await?;
    let mut sorted = items.to_vec();
    sorted.sort_by_key(|item| item.product_id);
    Ok(sorted.into_iter().find_map(|item| {
        match rows.iter().find(|(id, _)| *id == item.product_id.0) {
            None => Some((RejectionReason::UnknownProduct, item.product_id)),
            Some((_, stock)) if *stock < item.quantity => {
                Some((RejectionReason::InsufficientStock, item.product_id))
            }
            Some(_) => None,
        }
    }))
}
