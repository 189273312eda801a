//! The transactional outbox: events are written as rows inside the business transaction and
//! published by the relay after commit, so an event exists if and only if its change does.
//!
//! Both services own an `outbox` table of the same shape (see their migrations).

use serde::Serialize;
use shared::events::{Envelope, Event};
use sqlx::PgConnection;

use crate::http::TraceContext;

/// Writes `envelope` to the outbox on `conn` (which should be inside the transaction that
/// makes the change the event reports). The trace context rides along as AMQP headers.
pub async fn enqueue<E: Event + Serialize>(
    conn: &mut PgConnection,
    exchange: &str,
    envelope: &Envelope<E>,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let payload = serde_json::to_value(envelope).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let headers = serde_json::json!({ crate::http::trace::TRACEPARENT: trace.traceparent() });
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(envelope.event_id)
    .bind(exchange)
    .bind(envelope.event.routing_key())
    .bind(payload)
    .bind(headers)
    .execute(conn)
    .await?;
    Ok(())
}
