//! The `restocks` ledger: one row per applied restock, keyed by its idempotency key if any.
//! The MySQL forms of `inventory_service::products::restock_queries`.

use sqlx::MySqlConnection;
use uuid::Uuid;

use crate::is_duplicate;

/// A restock that was applied under an idempotency key, with the response it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRestock {
    pub product_id: i64,
    pub quantity: i64,
    pub response_body: Vec<u8>,
}

/// The restock recorded under `key`. PostgreSQL: `restock_queries::find_by_key`.
pub async fn find_by_key(
    conn: &mut MySqlConnection,
    key: &str,
) -> sqlx::Result<Option<StoredRestock>> {
    sqlx::query_as!(
        StoredRestock,
        "SELECT product_id, quantity, response_body FROM restocks WHERE idempotency_key = ?",
        key,
    )
    .fetch_optional(conn)
    .await
}

/// Records an applied restock; `false` when another restock holds the key already (a
/// concurrent first request committed first), in which case nothing was written and the
/// caller rolls back its stock change. PostgreSQL: `restock_queries::insert`.
///
/// PostgreSQL skips a conflict on `restocks_idempotency_key_unique` only: here a duplicate of
/// that key is the `false`, and any other error (an unknown product, a CHECK refused, a
/// duplicate restock id) stays an error. A key another transaction holds uncommitted is
/// waited for, as in PostgreSQL.
pub async fn insert(
    conn: &mut MySqlConnection,
    product_id: i64,
    quantity: i64,
    key: Option<&str>,
    response_body: &[u8],
) -> sqlx::Result<bool> {
    let inserted = sqlx::query!(
        "INSERT INTO restocks (restock_id, product_id, quantity, idempotency_key, response_body)
         VALUES (?, ?, ?, ?, ?)",
        Uuid::now_v7(),
        product_id,
        quantity,
        key,
        response_body,
    )
    .execute(conn)
    .await;
    match inserted {
        Ok(_) => Ok(true),
        Err(error) if is_duplicate(&error, "restocks_idempotency_key_unique") => Ok(false),
        Err(error) => Err(error),
    }
}
