//! `kill -9` of the real binary while batches are being written, on PostgreSQL and on
//! MariaDB: what was answered is committed whole, nothing is doubled, and what was not
//! answered can be retried into exactly one order.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::Value;
use testkit::TestDatabase;
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

use crate::helpers::{eventually, order_body};
use crate::intake::Binary;

const ORDERS: usize = 300;

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_9_mid_batch_loses_no_answered_order_doubles_none_and_leaves_tokens_retryable() {
    let db = TestDatabase::create("orders_intake_kill", &order_service::MIGRATOR).await;
    kill_9_mid_batch(&db.url, Rows::Postgres(&db.pool)).await;
}

/// The same on MariaDB: the batch is a transaction of several statements there, and a kill
/// between them must leave nothing of it.
#[tokio::test(flavor = "multi_thread")]
async fn on_mysql_a_kill_9_mid_batch_loses_no_answered_order_doubles_none() {
    let db = TestMySqlDatabase::create("orders_intake_kill", &order_service::MYSQL_MIGRATOR).await;
    kill_9_mid_batch(&db.url, Rows::MySql(&db.pool)).await;
}

async fn kill_9_mid_batch(url: &str, rows: Rows<'_>) {
    let prefix = testkit::redis_prefix();
    let port = testkit::free_port();
    let mut binary = Binary::start_on(url, &prefix, port, 8).await;
    let mut tokens = Vec::new();
    for _ in 0..ORDERS {
        tokens.push(binary.issue_token().await);
    }
    let body = |i: usize| order_body(1 + i as i64, 1, 1);
    let mut pending: FuturesUnordered<_> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let handle = binary.post_lenient(token, &body(i));
            async move { (i, handle.await.ok().flatten()) }
        })
        .collect();
    // Kill once some batches were answered and others are still queued or being written.
    let mut answered: HashMap<usize, Uuid> = HashMap::new();
    while answered.len() < ORDERS / 5 {
        let (i, order_id) = pending.next().await.expect("requests left");
        if let Some(order_id) = order_id {
            answered.insert(i, order_id);
        }
    }
    binary.child.kill().expect("SIGKILL");
    binary.child.wait().expect("reaped");
    while let Some((i, order_id)) = pending.next().await {
        if let Some(order_id) = order_id {
            answered.insert(i, order_id);
        }
    }
    assert!(
        answered.len() < ORDERS,
        "the kill came before the last answer"
    );

    // Every 202 is a committed order with its outcome and its event; nothing else half-written.
    for (i, order_id) in &answered {
        let token = Uuid::parse_str(&tokens[*i]).expect("uuid");
        let whole = rows.answered(*order_id, token).await;
        assert_eq!(whole, (1, 1), "answered order {order_id}");
    }
    rows.assert_whole_and_single().await;

    // Every token again, after the restart: an answered one replays its order; an unanswered
    // one gives one order (after its claim goes stale, if the dead process held it).
    binary = Binary::start_on(url, &prefix, port, 8).await;
    for (i, token) in tokens.iter().enumerate() {
        let order_id = eventually(Duration::from_secs(60), || async {
            let response = binary.post(token, &body(i)).await.expect("task");
            match response.status().as_u16() {
                202 => {
                    let order: Value = response.json().await.ok()?;
                    Uuid::parse_str(order["order_id"].as_str()?).ok()
                }
                409 => None,
                other => panic!("token {i}: unexpected status {other}"),
            }
        })
        .await;
        if let Some(first) = answered.get(&i) {
            assert_eq!(order_id, *first, "an answered token replays its order");
        }
    }
    let (orders, ..) = rows.assert_whole_and_single().await;
    assert_eq!(orders, ORDERS as i64, "one order per token");
}

/// Where the test reads the rows the service wrote.
#[derive(Clone, Copy)]
enum Rows<'a> {
    Postgres(&'a sqlx::PgPool),
    MySql(&'a sqlx::MySqlPool),
}

impl Rows<'_> {
    /// For an answered order: (its row joined to its token's outcome, its events).
    async fn answered(self, order_id: Uuid, token: Uuid) -> (i64, i64) {
        match self {
            Self::Postgres(pool) => sqlx::query_as(
                "SELECT (SELECT count(*) FROM orders o JOIN idempotency_keys k USING (order_id) \
                         WHERE o.order_id = $1 AND k.token = $2), \
                        (SELECT count(*) FROM outbox \
                         WHERE (payload->'payload'->>'order_id')::uuid = $1)",
            )
            .bind(order_id)
            .bind(token)
            .fetch_one(pool)
            .await
            .expect("rows"),
            Self::MySql(pool) => sqlx::query_as(
                "SELECT (SELECT COUNT(*) FROM orders o JOIN idempotency_keys k \
                         ON k.order_id = o.order_id WHERE o.order_id = ? AND k.token = ?), \
                        (SELECT COUNT(*) FROM outbox \
                         WHERE JSON_VALUE(payload, '$.payload.order_id') = ?)",
            )
            .bind(order_id)
            .bind(token)
            .bind(order_id.to_string())
            .fetch_one(pool)
            .await
            .expect("rows"),
        }
    }

    /// Orders, outcomes and events come in whole triples, one per token: (orders, outcomes,
    /// events, orders with an event).
    async fn assert_whole_and_single(self) -> (i64, i64, i64, i64) {
        let counts: (i64, i64, i64, i64) = match self {
            Self::Postgres(pool) => sqlx::query_as(
                "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM idempotency_keys), \
                        (SELECT count(*) FROM outbox), \
                        (SELECT count(DISTINCT payload->'payload'->>'order_id') FROM outbox)",
            )
            .fetch_one(pool)
            .await
            .expect("counts"),
            Self::MySql(pool) => sqlx::query_as(
                "SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM idempotency_keys), \
                        (SELECT COUNT(*) FROM outbox), \
                        (SELECT COUNT(DISTINCT JSON_VALUE(payload, '$.payload.order_id')) \
                         FROM outbox)",
            )
            .fetch_one(pool)
            .await
            .expect("counts"),
        };
        let (orders, outcomes, events, distinct_events) = counts;
        assert_eq!(orders, outcomes, "every order has its token's outcome");
        assert_eq!(orders, events, "every order has its event");
        assert_eq!(events, distinct_events, "no order has two events");
        counts
    }
}

impl Binary {
    /// `POST /orders` that tolerates the process dying: the order id of a 202, else `None`.
    pub fn post_lenient(&self, token: &str, body: &Value) -> tokio::task::JoinHandle<Option<Uuid>> {
        let request = self
            .client
            .post(self.url("/orders"))
            .header("Idempotency-Key", token)
            .json(body);
        tokio::spawn(async move {
            let response = request.send().await.ok()?;
            if response.status() != 202 {
                return None;
            }
            let order: Value = response.json().await.ok()?;
            Uuid::parse_str(order["order_id"].as_str()?).ok()
        })
    }
}
