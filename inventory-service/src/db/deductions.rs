//! The `deductions` table (the first outcome of every deduction id, kept for replays) and the
//! one statement that writes a whole batch of deductions with its stock change.

use std::collections::HashMap;

use shared::ids::ProductId;
use sqlx::PgConnection;

use crate::domain::deduction::{DeductionStatus, UnknownStatus};

/// The first outcome of a deduction id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDeduction {
    pub fingerprint: String,
    pub status: DeductionStatus,
    pub response_status: i16,
    pub response_body: Vec<u8>,
}

#[derive(sqlx::FromRow)]
struct Row {
    deduction_id: String,
    fingerprint: String,
    status: String,
    response_status: i16,
    response_body: Vec<u8>,
}

/// A deduction's outcome about to be recorded.
#[derive(Debug, Clone)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    pub items: serde_json::Value,
    pub status: DeductionStatus,
    /// `insufficient_stock` or `unknown_product` when rejected.
    pub rejection_reason: Option<&'static str>,
    pub response_status: u16,
    pub response_body: &'a [u8],
}

/// One product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StockRow {
    pub product_id: i64,
    pub stock: i64,
    pub version: i64,
}

/// The units of one product a batch deducts, guarded by the version they were judged at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockChange {
    pub product: ProductId,
    pub quantity: i64,
    pub version: i64,
}

/// What [`write_batch`] wrote; the caller commits only when both counts are full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWrite {
    /// Products whose conditional update matched (of the changes passed).
    pub changed: i64,
    /// Deduction rows inserted (of the rows passed); fewer when an id was taken meanwhile.
    pub recorded: i64,
}

/// The stock rows of `products` that exist.
pub async fn read_stock(
    conn: &mut PgConnection,
    products: &[ProductId],
) -> sqlx::Result<Vec<StockRow>> {
    let ids: Vec<i64> = products.iter().map(|p| p.0).collect();
    sqlx::query_as::<_, StockRow>(
        "SELECT product_id, stock, version FROM products WHERE product_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// The stored outcomes of those of `ids` that were seen before, by deduction id.
pub async fn find_many(
    conn: &mut PgConnection,
    ids: &[&str],
) -> sqlx::Result<HashMap<String, StoredDeduction>> {
    let rows = sqlx::query_as::<_, Row>(
        "SELECT deduction_id, fingerprint, status, response_status, response_body \
         FROM deductions WHERE deduction_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|row| {
            let status = DeductionStatus::parse(&row.status)
                .map_err(|e: UnknownStatus| sqlx::Error::Decode(Box::new(e)))?;
            let stored = StoredDeduction {
                fingerprint: row.fingerprint,
                status,
                response_status: row.response_status,
                response_body: row.response_body,
            };
            Ok((row.deduction_id, stored))
        })
        .collect()
}

/// Applies `changes` with the conditional update and inserts `deductions`, in one statement.
///
/// Both writes always run (data-modifying CTEs do); the counts say whether each did all of
/// its job: a version that moved or a stock gone short leaves its product unchanged, a
/// deduction id inserted meanwhile by another writer is skipped (`ON CONFLICT DO NOTHING`
/// waits for that writer's commit, so the next read sees its row). The caller rolls back
/// unless both counts are full: never a partial batch.
pub async fn write_batch(
    conn: &mut PgConnection,
    changes: &[StockChange],
    deductions: &[NewDeduction<'_>],
) -> sqlx::Result<BatchWrite> {
    let products: Vec<i64> = changes.iter().map(|c| c.product.0).collect();
    let quantities: Vec<i64> = changes.iter().map(|c| c.quantity).collect();
    let versions: Vec<i64> = changes.iter().map(|c| c.version).collect();
    let ids: Vec<&str> = deductions.iter().map(|d| d.deduction_id).collect();
    let fingerprints: Vec<&str> = deductions.iter().map(|d| d.fingerprint).collect();
    let items: Vec<&serde_json::Value> = deductions.iter().map(|d| &d.items).collect();
    let statuses: Vec<&str> = deductions.iter().map(|d| d.status.as_str()).collect();
    let reasons: Vec<Option<&str>> = deductions.iter().map(|d| d.rejection_reason).collect();
    let response_statuses: Vec<i16> = deductions
        .iter()
        .map(|d| i16::try_from(d.response_status).unwrap_or(500))
        .collect();
    let bodies: Vec<&[u8]> = deductions.iter().map(|d| d.response_body).collect();
    let (changed, recorded): (i64, i64) = sqlx::query_as(
        "WITH changed AS ( \
             UPDATE products AS p \
             SET stock = p.stock - c.quantity, version = p.version + 1, updated_at = now() \
             FROM unnest($1::int8[], $2::int8[], $3::int8[]) AS c (product_id, quantity, version) \
             WHERE p.product_id = c.product_id AND p.version = c.version \
               AND p.stock >= c.quantity \
             RETURNING p.product_id \
         ), recorded AS ( \
             INSERT INTO deductions (deduction_id, fingerprint, items, status, \
                                     rejection_reason, response_status, response_body) \
             SELECT * FROM unnest($4::text[], $5::text[], $6::jsonb[], $7::text[], \
                                  $8::text[], $9::int2[], $10::bytea[]) \
             ON CONFLICT ON CONSTRAINT deductions_pkey DO NOTHING \
             RETURNING deduction_id \
         ) \
         SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM recorded)",
    )
    .bind(&products)
    .bind(&quantities)
    .bind(&versions)
    .bind(&ids)
    .bind(&fingerprints)
    .bind(&items)
    .bind(&statuses)
    .bind(&reasons)
    .bind(&response_statuses)
    .bind(&bodies)
    .fetch_one(conn)
    .await?;
    Ok(BatchWrite { changed, recorded })
}
