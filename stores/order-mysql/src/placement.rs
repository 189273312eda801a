//! The intake's group commit: a batch of orders, their tokens' outcomes and their
//! `order.created` outbox rows, committed together.
//!
//! PostgreSQL writes the batch in one statement; here it is one transaction of four, in the
//! order InnoDB's row-by-row foreign key check needs (an outcome names its order, so the
//! order goes first):
//! 1. every order row of the batch;
//! 2. the outcomes, in token order, a token that already has one skipped by
//!    `ON DUPLICATE KEY UPDATE` (which waits for an uncommitted one, as PostgreSQL's
//!    `ON CONFLICT DO NOTHING` does, and then skips it): a used token fails alone, never the
//!    batch;
//! 3. the tokens that went in are read back (an outcome naming this batch's order id is this
//!    batch's: order ids are new), and the orders of the others deleted again: never
//!    committed, never seen;
//! 4. the outbox rows of the orders placed, in arrival order.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::{Acquire, MySqlConnection};
use uuid::Uuid;

/// One order of a batch, with everything its three rows hold.
#[derive(Debug, Clone)]
pub struct NewPlacement<'a> {
    pub order_id: Uuid,
    pub user_id: i64,
    pub items: &'a serde_json::Value,
    pub amount: Decimal,
    pub created_at: DateTime<Utc>,
    pub token: Uuid,
    pub fingerprint: &'a str,
    pub response_status: i16,
    pub response_body: &'a [u8],
    pub taker: Option<i64>,
    pub event: platform_mysql::outbox::NewRow<'a>,
}

/// Writes the batch; returns the tokens whose orders went in.
pub async fn insert_batch(
    conn: &mut MySqlConnection,
    batch: &[NewPlacement<'_>],
) -> sqlx::Result<Vec<Uuid>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let orders = serde_json::Value::Array(
        batch
            .iter()
            .map(|p| {
                serde_json::json!({
                    "order_id": p.order_id.to_string(),
                    "user_id": p.user_id,
                    "items": p.items,
                    "amount": p.amount.to_string(),
                    "created_at": p.created_at.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
                })
            })
            .collect(),
    )
    .to_string();
    let mut by_token: Vec<&NewPlacement<'_>> = batch.iter().collect();
    by_token.sort_by_key(|p| p.token);
    let outcomes = serde_json::Value::Array(
        by_token
            .iter()
            .map(|p| {
                serde_json::json!({
                    "token": p.token.to_string(),
                    "fingerprint": p.fingerprint,
                    "order_id": p.order_id.to_string(),
                    "status": p.response_status,
                    "body": hex::encode(p.response_body),
                    "taker": p.taker,
                })
            })
            .collect(),
    )
    .to_string();
    let mut tx = conn.begin().await?;
    // DECIMAL and DATETIME(6) columns of JSON_TABLE read the text exactly: no float between.
    sqlx::query!(
        "INSERT INTO orders (order_id, user_id, items, amount, created_at, updated_at)
         SELECT UNHEX(REPLACE(o.order_id, '-', '')), o.user_id, o.items, o.amount,
                o.created_at, o.created_at
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             order_id CHAR(36) PATH '$.order_id',
             user_id BIGINT PATH '$.user_id',
             items JSON PATH '$.items',
             amount DECIMAL(14, 2) PATH '$.amount',
             created_at DATETIME(6) PATH '$.created_at')) AS o",
        orders,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO idempotency_keys
             (token, fingerprint, order_id, response_status, response_body, taker)
         SELECT UNHEX(REPLACE(k.token, '-', '')), k.fingerprint,
                UNHEX(REPLACE(k.order_id, '-', '')), k.status, UNHEX(k.body), k.taker
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             token CHAR(36) PATH '$.token',
             fingerprint TEXT PATH '$.fingerprint',
             order_id CHAR(36) PATH '$.order_id',
             status SMALLINT PATH '$.status',
             body LONGTEXT PATH '$.body',
             taker BIGINT PATH '$.taker')) AS k
         ORDER BY k.n
         ON DUPLICATE KEY UPDATE token = idempotency_keys.token",
        outcomes,
    )
    .execute(&mut *tx)
    .await?;
    let order_ids: Vec<Uuid> = batch.iter().map(|p| p.order_id).collect();
    let placed: HashSet<Uuid> = sqlx::query_scalar!(
        "SELECT k.order_id AS `order_id: Uuid`
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS t
         STRAIGHT_JOIN idempotency_keys AS k FORCE INDEX (PRIMARY) ON k.token = UNHEX(REPLACE(t.id, '-', ''))",
        platform_mysql::json_ids(&by_token.iter().map(|p| p.token).collect::<Vec<_>>()),
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .filter(|order_id| order_ids.contains(order_id))
    .collect();
    let skipped: Vec<Uuid> = order_ids
        .iter()
        .copied()
        .filter(|order_id| !placed.contains(order_id))
        .collect();
    if !skipped.is_empty() {
        sqlx::query!(
            "DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS s
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(s.id, '-', ''))",
            platform_mysql::json_ids(&skipped),
        )
        .execute(&mut *tx)
        .await?;
    }
    let events: Vec<platform_mysql::outbox::NewRow<'_>> = batch
        .iter()
        .filter(|p| placed.contains(&p.order_id))
        .map(|p| p.event)
        .collect();
    platform_mysql::outbox::insert(&mut tx, &events).await?;
    tx.commit().await?;
    Ok(batch
        .iter()
        .filter(|p| placed.contains(&p.order_id))
        .map(|p| p.token)
        .collect())
}
