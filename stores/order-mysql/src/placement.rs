//! The intake's group commit: a batch of orders, their tokens' outcomes and their
//! `order.created` outbox rows, committed together.
//!
//! PostgreSQL writes the batch in one statement; here it is one transaction of three (six
//! when a token was used before), in the
//! order InnoDB's row-by-row foreign key check needs (an outcome names its order, so the
//! order goes first):
//! 1. every order row of the batch;
//! 2. the outcomes, in token order: a plain insert, since Redis claimed every token for this
//!    batch and almost always none has an outcome yet;
//! 3. only when one has (Redis lost its keys, or another instance placed it): the outcomes
//!    again with `ON DUPLICATE KEY UPDATE`, which waits for an uncommitted one, as
//!    PostgreSQL's `ON CONFLICT DO NOTHING` does, and then skips it; the tokens that went in
//!    read back, and the orders of the others deleted again, never committed, never seen. A
//!    used token fails alone, never the batch;
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
    let order_ids: Vec<Uuid> = batch.iter().map(|p| p.order_id).collect();
    // Redis claimed every token for this batch, so almost always none has an outcome: a
    // plain insert, and only when it meets one, the statements that skip it.
    let placed: HashSet<Uuid> = match insert_outcomes(&mut tx, &outcomes).await {
        Ok(()) => order_ids.iter().copied().collect(),
        Err(error) if crate::is_duplicate_key(&error) => {
            skip_used_tokens(&mut tx, &outcomes, &by_token, &order_ids).await?
        }
        Err(error) => return Err(error),
    };
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

/// Every outcome, in token order; a token that has one already fails the statement with a
/// duplicate key (after waiting for its writer, when that one has not committed yet), and
/// InnoDB undoes the statement alone: the transaction goes on.
async fn insert_outcomes(conn: &mut MySqlConnection, outcomes: &str) -> sqlx::Result<()> {
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
         ORDER BY k.n",
        outcomes,
    )
    .execute(conn)
    .await
    .map(drop)
}

/// The outcomes again, a token that has one skipped (`ON DUPLICATE KEY UPDATE`); the orders
/// whose outcomes went in, read back (an outcome naming this batch's order is this batch's:
/// order ids are new); the others' order rows deleted, never committed. The orders placed.
async fn skip_used_tokens(
    conn: &mut MySqlConnection,
    outcomes: &str,
    by_token: &[&NewPlacement<'_>],
    order_ids: &[Uuid],
) -> sqlx::Result<HashSet<Uuid>> {
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
    .execute(&mut *conn)
    .await?;
    let tokens: Vec<Uuid> = by_token.iter().map(|p| p.token).collect();
    let placed: HashSet<Uuid> = sqlx::query_scalar!(
        "SELECT k.order_id AS `order_id: Uuid`
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS t
         STRAIGHT_JOIN idempotency_keys AS k FORCE INDEX (PRIMARY)
            ON k.token = UNHEX(REPLACE(t.id, '-', ''))",
        platform_mysql::json_ids(&tokens),
    )
    .fetch_all(&mut *conn)
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
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY)
                ON o.order_id = UNHEX(REPLACE(s.id, '-', ''))",
            platform_mysql::json_ids(&skipped),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(placed)
}
