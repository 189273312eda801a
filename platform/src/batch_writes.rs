//! Multi-row writes of the messaging tables, for handlers that serve a batch in one
//! transaction: one statement for all the batch's outbox rows, one for its message ids.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::outbox::NewOutboxRow;

/// Writes every row to the outbox in one statement (inside the caller's transaction).
pub async fn enqueue_all(conn: &mut PgConnection, rows: Vec<NewOutboxRow>) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut exchanges = Vec::with_capacity(rows.len());
    let mut routing_keys = Vec::with_capacity(rows.len());
    let mut payloads = Vec::with_capacity(rows.len());
    let mut headers = Vec::with_capacity(rows.len());
    for row in rows {
        ids.push(row.event_id);
        exchanges.push(row.exchange);
        routing_keys.push(row.routing_key.to_owned());
        payloads.push(row.payload);
        headers.push(row.headers);
    }
    // unnest keeps the rows in order, so the relay publishes them in the batch's order.
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, headers) \
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[])",
    )
    .bind(ids)
    .bind(exchanges)
    .bind(routing_keys)
    .bind(payloads)
    .bind(headers)
    .execute(conn)
    .await
    .map(drop)
}

/// Records every message id in one statement; how many were new. Fewer than given means
/// another consumer recorded some of them since the caller looked: the caller rolls back
/// and tries again, to find them recorded.
pub async fn record_all(conn: &mut PgConnection, messages: &[(Uuid, &str)]) -> sqlx::Result<u64> {
    if messages.is_empty() {
        return Ok(0);
    }
    let (ids, kinds): (Vec<Uuid>, Vec<&str>) = messages.iter().copied().unzip();
    let done = sqlx::query(
        "INSERT INTO processed_messages (message_id, kind) \
         SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING",
    )
    .bind(ids)
    .bind(kinds)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Which of `ids` were recorded already.
pub async fn recorded_among(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT message_id FROM processed_messages WHERE message_id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}
