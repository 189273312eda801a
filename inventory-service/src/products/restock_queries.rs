//! The `restocks` ledger: one row per applied restock, keyed by its idempotency key if any.
//! Every statement is checked against the migrations at build time (`sqlx::query!`); on
//! MySQL, the statements of `inventory_mysql::restocks`.

use platform::storage::Conn;
use shared::ids::ProductId;
use uuid::Uuid;

/// A restock that was applied under an idempotency key, with the response it got.
#[derive(Debug, Clone)]
pub struct StoredRestock {
    pub product_id: i64,
    pub quantity: i64,
    pub response_body: Vec<u8>,
}

pub async fn find_by_key(conn: Conn<'_>, key: &str) -> sqlx::Result<Option<StoredRestock>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = inventory_mysql::restocks::find_by_key(conn, key).await?;
            return Ok(row.map(|row| StoredRestock {
                product_id: row.product_id,
                quantity: row.quantity,
                response_body: row.response_body,
            }));
        }
    };
    sqlx::query_as!(
        StoredRestock,
        "SELECT product_id, quantity, response_body FROM restocks WHERE idempotency_key = $1",
        key,
    )
    .fetch_optional(conn)
    .await
}

/// Records an applied restock; `false` when another restock holds the key already (a
/// concurrent first request committed first), in which case nothing was written. On MySQL
/// that is a duplicate of `restocks_idempotency_key_unique` (error 1062 naming that key);
/// any other error stays one, as PostgreSQL's `ON CONFLICT` skips that key only.
pub async fn insert(
    conn: Conn<'_>,
    product: ProductId,
    quantity: i64,
    key: Option<&str>,
    response_body: &[u8],
) -> sqlx::Result<bool> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            return inventory_mysql::restocks::insert(
                conn,
                product.0,
                quantity,
                key,
                response_body,
            )
            .await;
        }
    };
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
