//! `idempotency_token_secret`: the one row holding the key tokens are signed with when
//! none is configured.

use platform::storage::Database;
use sqlx::PgPool;

use crate::tokens::signed::TokenSecret;

/// The stored secret; the first instance to start stores `candidate`. Reads first, so a
/// start writes only when there is no secret yet.
pub async fn load_or_store(db: &Database, candidate: &TokenSecret) -> sqlx::Result<TokenSecret> {
    let pool = match db {
        Database::Postgres(pool) => pool,
        Database::MySql(store) => {
            let secret =
                order_mysql::tokens::load_or_store_secret(&store.0, candidate.as_bytes()).await?;
            return Ok(TokenSecret::new(secret));
        }
    };
    if let Some(secret) = load(pool).await? {
        return Ok(secret);
    }
    // Two instances starting at once: the first insert wins, the other reads its row.
    sqlx::query!(
        "INSERT INTO idempotency_token_secret (secret) VALUES ($1)
         ON CONFLICT (singleton) DO NOTHING",
        candidate.as_bytes(),
    )
    .execute(pool)
    .await?;
    load(pool).await?.ok_or(sqlx::Error::RowNotFound)
}

async fn load(pool: &PgPool) -> sqlx::Result<Option<TokenSecret>> {
    let secret = sqlx::query_scalar!("SELECT secret FROM idempotency_token_secret WHERE singleton")
        .fetch_optional(pool)
        .await?;
    Ok(secret.map(TokenSecret::new))
}
