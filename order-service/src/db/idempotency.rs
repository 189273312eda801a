//! `idempotency_keys`: the durable outcome of each used token, written in the order's
//! transaction. Its primary key is the last line of defence against a second order.

use std::collections::HashMap;

use sqlx::PgConnection;
use uuid::Uuid;

use crate::idempotency::StoredResponse;

/// The stored outcomes of those of `tokens` that have one, in one query.
pub async fn find_all(
    conn: &mut PgConnection,
    tokens: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, StoredResponse>> {
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Uuid, String, Uuid, i16, Vec<u8>)> = sqlx::query_as(
        "SELECT token, fingerprint, order_id, response_status, response_body \
         FROM idempotency_keys WHERE token = ANY($1)",
    )
    .bind(tokens)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(token, fingerprint, order_id, status, body)| {
            let response = StoredResponse {
                fingerprint,
                order_id,
                status: u16::try_from(status).unwrap_or_default(),
                body: String::from_utf8_lossy(&body).into_owned(),
            };
            (token, response)
        })
        .collect())
}
