//! The statement that places an order: the order row, the token's outcome and the
//! `order.created` outbox row, written by one `INSERT … WITH` statement.
//!
//! One statement is one transaction in PostgreSQL, so the three rows commit together or not
//! at all, exactly as with `BEGIN … COMMIT`, but in one round trip instead of five: this is
//! the hottest write of the system. The response body is built before the statement (the
//! timestamps come from here, truncated to PostgreSQL's microseconds), so the stored replay and
//! the row agree byte for byte.

use chrono::{DateTime, Utc};
use platform::outbox::NewOutboxRow;
use shared::ids::OrderId;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::NewOrder;
use crate::idempotency::StoredResponse;

pub async fn insert(
    conn: &mut PgConnection,
    order_id: OrderId,
    order: &NewOrder,
    created_at: DateTime<Utc>,
    token: &Uuid,
    response: &StoredResponse,
    event: NewOutboxRow,
) -> sqlx::Result<()> {
    let query = sqlx::query(
        "WITH new_order AS ( \
             INSERT INTO orders (order_id, user_id, items, amount, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $5) \
         ), outcome AS ( \
             INSERT INTO idempotency_keys (token, fingerprint, order_id, response_status, response_body) \
             VALUES ($6, $7, $1, $8, $9) \
         ) \
         INSERT INTO outbox (event_id, exchange, routing_key, payload, headers) \
         VALUES ($10, $11, $12, $13, $14)",
    )
    .bind(order_id.0)
    .bind(order.user_id.0)
    .bind(Json(&order.items))
    .bind(order.amount)
    .bind(created_at)
    .bind(token)
    .bind(&response.fingerprint)
    .bind(i16::try_from(response.status).unwrap_or(i16::MAX))
    .bind(response.body.as_bytes());
    event.bind_to(query).execute(conn).await.map(drop)
}
