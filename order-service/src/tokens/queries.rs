//! `idempotency_keys`: the durable outcome of each used token and who took it, written in the
//! order's transaction. Its primary key is the last line of defence against a second order.

use std::collections::HashMap;

use shared::ids::UserId;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::tokens::{ResponseStatus, StoredResponse};

/// The stored outcomes of those of `tokens` that have one, in one query.
pub async fn find_all(
    conn: &mut PgConnection,
    tokens: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, StoredResponse>> {
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        "SELECT token, fingerprint, order_id, response_status, response_body, taker
         FROM idempotency_keys WHERE token = ANY($1)",
        tokens,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|row| {
            let decode = |column: &str, source: Box<dyn std::error::Error + Send + Sync>| {
                sqlx::Error::ColumnDecode {
                    index: column.to_owned(),
                    source,
                }
            };
            let response = StoredResponse {
                fingerprint: row.fingerprint,
                order_id: row.order_id,
                status: ResponseStatus::try_from(row.response_status)
                    .map_err(|e| decode("response_status", Box::new(e)))?,
                body: String::from_utf8(row.response_body)
                    .map_err(|e| decode("response_body", Box::new(e)))?,
                taker: row.taker.map(UserId),
            };
            Ok((row.token, response))
        })
        .collect()
}
