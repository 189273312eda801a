//! The `restocks` ledger: one row per applied restock, keyed by its idempotency key if any.
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use shared::ids::ProductId;
use sqlx::PgConnection;
use uuid::Uuid;

/// A restock that was applied under an idempotency key, with the response it got.
#[derive(Debug, Clone)]
pub struct StoredRestock {
    pub product_id: i64,
    pub quantity: i64,
    pub response_body: Vec<u8>,
}

pub async fn find_by_key(
    conn: &mut PgConnection,
    key: &str,
) -> sqlx::Result<Option<StoredRestock>> {
    sqlx::query_as!(
        StoredRestock,
        "SELECT product_id, quantity, response_body FROM restocks WHERE idempotency_key = $1",
        key,
    )
    .fetch_optional(conn)
    .await
}

/// Records an applied restock; `false` when another restock holds the key already (a
/// concurrent first request committed first), in which case nothing was written.
pub async fn insert(
    conn: &mut PgConnection,
    product: ProductId,
    quantity: i64,
    key: Option<&str>,
    response_body: &[u8],
) -> sqlx::Result<bool> {
    let result = sqlx::query!(
        "INSERT INTO restocks (restock_id, product_id, quantity, idempotency_key, response_body)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT restocks_idempotency_key_unique DO NOTHING",
        Uuid::now_v7(),
        product.0,
        quantity,
        key,
        response_body,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}
