//! The statement that places a batch of orders: their order rows, their tokens' outcomes (with
//! their takers) and their `order.created` outbox rows, written by one `INSERT … WITH`
//! statement.
//!
//! On MySQL the same rows are written by `order_mysql::placement`, in one transaction.
//!
//! One statement is one transaction in PostgreSQL, so every row of the batch commits together,
//! in one round trip and one WAL flush, however many orders it holds: this is the group
//! commit of order intake ([`crate::orders::intake`]). A batch of one runs the same statement.
//!
//! A token whose outcome is already stored (Redis forgot it was used, or another instance
//! placed it) is skipped by `ON CONFLICT DO NOTHING` on `idempotency_keys_pkey`, and its order
//! and outbox rows with it: it fails alone, never the batch. The statement returns the tokens
//! that went in. A conflicting outcome that is not committed yet makes the statement wait for
//! it, and then skip. Outcomes are inserted in token order, so two instances that insert the
//! same tokens (only after Redis lost its keys) wait on each other in one order, never in a
//! cycle. The outbox rows keep the batch's arrival order.
//!
//! The response bodies are built before the statement (the timestamps come from the caller,
//! truncated to PostgreSQL's microseconds), so each stored replay and its row agree byte for
//! byte.

use chrono::{DateTime, Utc};
use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use rust_decimal::Decimal;
use shared::ids::OrderId;
use uuid::Uuid;

use crate::orders::NewOrder;
use crate::tokens::StoredResponse;

/// One order of a batch, with everything its three rows hold.
#[derive(Debug, Clone)]
pub struct NewPlacement {
    pub order_id: OrderId,
    pub order: NewOrder,
    pub created_at: DateTime<Utc>,
    pub token: Uuid,
    /// The 202 this order is answered with, stored as the token's outcome.
    pub response: StoredResponse,
    pub event: NewOutboxRow,
}

/// The rows of a batch, one array per column, as `unnest` takes them.
#[derive(Default)]
struct Columns {
    order_id: Vec<Uuid>,
    user_id: Vec<i64>,
    items: Vec<serde_json::Value>,
    amount: Vec<Decimal>,
    created_at: Vec<DateTime<Utc>>,
    token: Vec<Uuid>,
    fingerprint: Vec<String>,
    status: Vec<i16>,
    body: Vec<Vec<u8>>,
    taker: Vec<Option<i64>>,
    event_id: Vec<Uuid>,
    exchange: Vec<String>,
    routing_key: Vec<&'static str>,
    payload: Vec<serde_json::Value>,
    headers: Vec<serde_json::Value>,
}

impl Columns {
    fn of(batch: &[NewPlacement]) -> Result<Self, serde_json::Error> {
        let mut c = Self::default();
        for p in batch {
            c.order_id.push(p.order_id.0);
            c.user_id.push(p.order.user_id.0);
            c.items.push(serde_json::to_value(&p.order.items)?);
            c.amount.push(p.order.amount);
            c.created_at.push(p.created_at);
            c.token.push(p.token);
            c.fingerprint.push(p.response.fingerprint.clone());
            c.status.push(i16::from(p.response.status));
            c.body.push(p.response.body.clone().into_bytes());
            c.taker.push(p.response.taker.map(|t| t.0));
            c.event_id.push(p.event.event_id);
            c.exchange.push(p.event.exchange.clone());
            c.routing_key.push(p.event.routing_key);
            c.payload.push(p.event.payload.clone());
            c.headers.push(p.event.headers.clone());
        }
        Ok(c)
    }
}

/// Writes the batch; returns the tokens whose orders went in (the others already had an
/// outcome, which the caller reads with [`crate::tokens::queries::find_all`]).
pub async fn insert_batch(conn: Conn<'_>, batch: &[NewPlacement]) -> sqlx::Result<Vec<Uuid>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return insert_batch_mysql(conn, batch).await,
    };
    let c = Columns::of(batch).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query_scalar!(
        r#"WITH input AS (
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::jsonb[], $4::numeric[],
                                  $5::timestamptz[], $6::uuid[], $7::text[], $8::int2[],
                                  $9::bytea[], $10::uuid[], $11::text[], $12::text[],
                                  $13::jsonb[], $14::jsonb[], $15::int8[]) WITH ORDINALITY
                 AS t(order_id, user_id, items, amount, created_at, token, fingerprint,
                      response_status, response_body, event_id, exchange, routing_key,
                      payload, headers, taker, arrival)
         ), outcome AS (
             INSERT INTO idempotency_keys (token, fingerprint, order_id, response_status, response_body, taker)
             SELECT token, fingerprint, order_id, response_status, response_body, taker
             FROM input ORDER BY token
             ON CONFLICT (token) DO NOTHING
             RETURNING token, order_id
         ), placed AS (
             SELECT input.* FROM input JOIN outcome USING (order_id)
         ), new_order AS (
             INSERT INTO orders (order_id, user_id, items, amount, created_at, updated_at)
             SELECT order_id, user_id, items, amount, created_at, created_at FROM placed
         ), event AS (
             INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
             SELECT event_id, exchange, routing_key, payload, headers FROM placed
             ORDER BY arrival
         )
         SELECT token AS "token!" FROM outcome"#,
        &c.order_id,
        &c.user_id,
        &c.items,
        &c.amount,
        &c.created_at,
        &c.token,
        &c.fingerprint,
        &c.status,
        &c.body,
        &c.event_id,
        &c.exchange,
        &c.routing_key as &[&str],
        &c.payload,
        &c.headers,
        &c.taker as &[Option<i64>],
    )
    .fetch_all(conn)
    .await
}

/// The batch on MySQL: the same rows, written by `order_mysql::placement` (four statements in
/// one transaction, see there).
async fn insert_batch_mysql(
    conn: &mut sqlx::MySqlConnection,
    batch: &[NewPlacement],
) -> sqlx::Result<Vec<Uuid>> {
    let items = batch
        .iter()
        .map(|p| serde_json::to_value(&p.order.items))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let rows: Vec<order_mysql::placement::NewPlacement<'_>> = batch
        .iter()
        .zip(&items)
        .map(|(p, items)| order_mysql::placement::NewPlacement {
            order_id: p.order_id.0,
            user_id: p.order.user_id.0,
            items,
            amount: p.order.amount,
            created_at: p.created_at,
            token: p.token,
            fingerprint: &p.response.fingerprint,
            response_status: i16::from(p.response.status),
            response_body: p.response.body.as_bytes(),
            taker: p.response.taker.map(|t| t.0),
            event: p.event.as_mysql(),
        })
        .collect();
    order_mysql::placement::insert_batch(conn, &rows).await
}
