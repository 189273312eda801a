//! `idempotency_keys` (each used token's outcome and taker) and `idempotency_token_secret`.

use sqlx::{MySqlConnection, MySqlPool};
use uuid::Uuid;

/// A token's stored outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub token: Uuid,
    pub fingerprint: String,
    pub order_id: Uuid,
    pub response_status: i16,
    pub response_body: Vec<u8>,
    pub taker: Option<i64>,
}

/// The stored outcomes of those of `tokens` that have one, in one query.
pub async fn find_all(
    conn: &mut MySqlConnection,
    tokens: &[Uuid],
) -> sqlx::Result<Vec<TokenRecord>> {
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        TokenRecord,
        "SELECT k.token AS `token: Uuid`, k.fingerprint, k.order_id AS `order_id: Uuid`,
                k.response_status, k.response_body, k.taker
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS t
         STRAIGHT_JOIN idempotency_keys AS k FORCE INDEX (PRIMARY) ON k.token = UNHEX(REPLACE(t.id, '-', ''))",
        platform_mysql::json_ids(tokens),
    )
    .fetch_all(conn)
    .await
}

/// The stored secret; the first instance to start stores `candidate` (two starting at once:
/// the first insert wins, the other reads its row).
pub async fn load_or_store_secret(pool: &MySqlPool, candidate: &[u8]) -> sqlx::Result<Vec<u8>> {
    if let Some(secret) = load_secret(pool).await? {
        return Ok(secret);
    }
    sqlx::query!(
        "INSERT INTO idempotency_token_secret (singleton, secret) VALUES (TRUE, ?)
         ON DUPLICATE KEY UPDATE singleton = singleton",
        candidate,
    )
    .execute(pool)
    .await?;
    load_secret(pool).await?.ok_or(sqlx::Error::RowNotFound)
}

async fn load_secret(pool: &MySqlPool) -> sqlx::Result<Option<Vec<u8>>> {
    sqlx::query_scalar!("SELECT secret FROM idempotency_token_secret WHERE singleton = TRUE")
        .fetch_optional(pool)
        .await
}
