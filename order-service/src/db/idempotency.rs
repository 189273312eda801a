//! `idempotency_keys`: the durable outcome of each used token and who took it, written in the
//! order's transaction. Its primary key is the last line of defence against a second order.

use std::collections::HashMap;

use shared::ids::UserId;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::idempotency::StoredResponse;

#[derive(sqlx::FromRow)]
struct OutcomeRow {
    token: Uuid,
    fingerprint: String,
    order_id: Uuid,
    response_status: i16,
    response_body: Vec<u8>,
    taker: Option<i64>,
}

/// The stored outcomes of those of `tokens` that have one, in one query.
pub async fn find_all(
    conn: &mut PgConnection,
    tokens: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, StoredResponse>> {
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<OutcomeRow> = sqlx::query_as(
        "SELECT token, fingerprint, order_id, response_status, response_body, taker \
         FROM idempotency_keys WHERE token = ANY($1)",
    )
    .bind(tokens)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let response = StoredResponse {
                fingerprint: row.fingerprint,
                order_id: row.order_id,
                status: u16::try_from(row.response_status).unwrap_or_default(),
                body: String::from_utf8_lossy(&row.response_body).into_owned(),
                taker: row.taker.map(UserId),
            };
            (row.token, response)
        })
        .collect())
}
