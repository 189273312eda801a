//! `idempotency_keys`: the durable outcome of each used token, written in the order's
//! transaction. Its primary key is the last line of defence against a second order.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::idempotency::StoredResponse;

/// The constraint a concurrent or post-Redis-loss duplicate runs into.
pub const TOKEN_KEY: &str = "idempotency_keys_pkey";

pub async fn find(conn: &mut PgConnection, token: &Uuid) -> sqlx::Result<Option<StoredResponse>> {
    let row: Option<(String, Uuid, i16, Vec<u8>)> = sqlx::query_as(
        "SELECT fingerprint, order_id, response_status, response_body \
         FROM idempotency_keys WHERE token = $1",
    )
    .bind(token)
    .fetch_optional(conn)
    .await?;
    Ok(
        row.map(|(fingerprint, order_id, status, body)| StoredResponse {
            fingerprint,
            order_id,
            status: u16::try_from(status).unwrap_or_default(),
            body: String::from_utf8_lossy(&body).into_owned(),
        }),
    )
}
