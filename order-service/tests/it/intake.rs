//! Order intake in batches, observed on the real binary: its metrics are its own there, so a
//! test can wait until exactly its requests are queued behind a commit that a transaction of
//! the test holds up. Orders written by one commit share their `xmin`, which is how the tests
//! count batches.

use std::collections::{HashMap, HashSet};
use std::process::Child;
use std::time::Duration;

use reqwest::Response;
use serde_json::Value;
use sqlx::{Postgres, Transaction};
use testkit::TestDatabase;
use uuid::Uuid;

use crate::helpers::{assert_problem, eventually, order_body, store_outcome};

/// order-service as a process of its own, with its broker unreachable (outbox rows stay put).
pub struct Binary {
    pub child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

impl Binary {
    pub async fn start(db: &TestDatabase, prefix: &str, port: u16, batch_max: usize) -> Self {
        Self::start_on(&db.url, prefix, port, batch_max).await
    }

    /// [`Binary::start`] on the database `url` names, PostgreSQL or MySQL.
    pub async fn start_on(url: &str, prefix: &str, port: u16, batch_max: usize) -> Self {
        let child = testkit::service_command(
            env!("CARGO_BIN_EXE_order-service"),
            url,
            testkit::NO_BROKER,
            prefix,
        )
        .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("INTAKE_BATCH_MAX", batch_max.to_string())
        .spawn()
        .expect("start the binary");
        let binary = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        };
        testkit::wait_until_ok(&binary.url("/healthz")).await;
        binary
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn issue_token(&self) -> String {
        let request = self.client.post(self.url("/idempotency-tokens"));
        let body = testkit::fetch_json(request, "issue").await;
        body["token"].as_str().expect("token").to_owned()
    }

    /// Sends `POST /orders` from a task of its own; the handle resolves to the response.
    pub fn post(&self, token: &str, body: &Value) -> tokio::task::JoinHandle<Response> {
        let request = self
            .client
            .post(self.url("/orders"))
            .header("Idempotency-Key", token)
            .json(body);
        tokio::spawn(async move { request.send().await.expect("request") })
    }

    /// Orders queued for the next batch.
    pub async fn waiting(&self) -> f64 {
        testkit::scrape_metric(&self.base, "order_intake_waiting").await
    }

    /// Waits until exactly `n` orders are queued.
    pub async fn wait_for_queued(&self, n: usize) {
        eventually(Duration::from_secs(20), || async {
            (self.waiting().await == n as f64).then_some(())
        })
        .await;
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Holds the intake up: a transaction of the test owns the outcome of a token, and a request
/// with that token is sent. Its batch waits on the uncommitted key until the test commits;
/// whatever arrives meanwhile queues for the batches after it.
pub async fn hold_intake<'a>(
    binary: &Binary,
    db: &'a TestDatabase,
) -> (Transaction<'a, Postgres>, tokio::task::JoinHandle<Response>) {
    let token = binary.issue_token().await;
    let body = order_body(1, 1, 1);
    let mut blocker = db.pool.begin().await.expect("begin");
    store_outcome(&mut blocker, &token, &body).await;
    let held = binary.post(&token, &body);
    eventually(Duration::from_secs(20), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&db.pool)
        .await
        .expect("pg_stat_activity");
        (waiting > 0).then_some(())
    })
    .await;
    (blocker, held)
}

/// The number of orders of each commit, among orders whose ids are `ids`.
async fn commits_of(db: &TestDatabase, ids: &[Uuid]) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM orders WHERE order_id = ANY($1) GROUP BY xmin::text ORDER BY 1",
    )
    .bind(ids)
    .fetch_all(&db.pool)
    .await
    .expect("commits")
}

async fn order_id_of(response: Response) -> (Uuid, Value) {
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.expect("json");
    let id = Uuid::parse_str(body["order_id"].as_str().expect("order id")).expect("uuid");
    (id, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_service_writes_a_batch_of_one_at_once() {
    let db = TestDatabase::create("orders_intake_one", &order_service::MIGRATOR).await;
    let binary = Binary::start(&db, &testkit::redis_prefix(), testkit::free_port(), 4).await;
    let token = binary.issue_token().await;
    let (order_id, _) = order_id_of(
        binary
            .post(&token, &order_body(5, 1, 1))
            .await
            .expect("task"),
    )
    .await;
    assert_eq!(commits_of(&db, &[order_id]).await, vec![1]);
    let count = testkit::scrape_metric(&binary.base, "order_intake_batch_size_count").await;
    let sum = testkit::scrape_metric(&binary.base, "order_intake_batch_size_sum").await;
    assert_eq!((count, sum), (1.0, 1.0), "one commit, of one order");
}

#[tokio::test(flavor = "multi_thread")]
async fn three_times_the_cap_of_queued_requests_go_in_three_full_batches_each_answered_its_own() {
    const CAP: usize = 4;
    let db = TestDatabase::create("orders_intake_cap", &order_service::MIGRATOR).await;
    let binary = Binary::start(&db, &testkit::redis_prefix(), testkit::free_port(), CAP).await;
    let mut tokens = Vec::new();
    for _ in 0..3 * CAP {
        tokens.push(binary.issue_token().await);
    }
    let (blocker, held) = hold_intake(&binary, &db).await;
    // Each request is told apart by its user id.
    let sent: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| binary.post(token, &order_body(100 + i as i64, 7, 1)))
        .collect();
    binary.wait_for_queued(3 * CAP).await;
    blocker.commit().await.expect("let the intake go");

    let held = held.await.expect("task");
    assert_eq!(held.headers()["idempotent-replayed"], "true");
    let mut ids = Vec::new();
    for (i, response) in sent.into_iter().enumerate() {
        let (id, body) = order_id_of(response.await.expect("task")).await;
        assert_eq!(
            body["user_id"],
            100 + i as i64,
            "each request gets its own order"
        );
        ids.push(id);
    }
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3 * CAP);
    assert_eq!(commits_of(&db, &ids).await, vec![CAP as i64; 3]);
    let (orders, outcomes, events): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM idempotency_keys), \
                (SELECT count(*) FROM outbox)",
    )
    .fetch_one(&db.pool)
    .await
    .expect("counts");
    // The held request's token had the test's order: it added nothing.
    assert_eq!(
        (orders, outcomes, events),
        (3 * CAP as i64 + 1, 3 * CAP as i64 + 1, 3 * CAP as i64)
    );
    let published: HashSet<Uuid> =
        sqlx::query_scalar("SELECT (payload->'payload'->>'order_id')::uuid FROM outbox")
            .fetch_all(&db.pool)
            .await
            .expect("outbox")
            .into_iter()
            .collect();
    assert_eq!(published, ids.into_iter().collect::<HashSet<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn token_conflicts_inside_one_batch_are_settled_each_alone() {
    let db = TestDatabase::create("orders_intake_conflict", &order_service::MIGRATOR).await;
    let prefix = testkit::redis_prefix();
    let binary = Binary::start(&db, &prefix, testkit::free_port(), 64).await;
    let shared = binary.issue_token().await;
    let used = binary.issue_token().await;
    let fresh = binary.issue_token().await;
    // `used` was placed already, and Redis forgot it: its request is claimed again and only
    // PostgreSQL's unique key can tell.
    let used_body = order_body(3, 1, 1);
    let mut conn = db.pool.acquire().await.expect("conn");
    let stored = store_outcome(&mut conn, &used, &used_body).await;
    forget(&prefix, &used).await;

    let (blocker, held) = hold_intake(&binary, &db).await;
    // Queued one after the other, so the batch holds them in this order.
    let mut sent = HashMap::new();
    for (name, token, body) in [
        ("first", &shared, order_body(1, 1, 1)),
        ("same", &shared, order_body(1, 1, 1)),
        ("other body", &shared, order_body(1, 1, 2)),
        ("used", &used, used_body.clone()),
        ("fresh", &fresh, order_body(2, 1, 1)),
    ] {
        sent.insert(name, binary.post(token, &body));
        binary.wait_for_queued(sent.len()).await;
    }
    blocker.commit().await.expect("let the intake go");
    held.await.expect("task");

    let mut answer = |name| sent.remove(name).expect("sent");
    let (first, _) = order_id_of(answer("first").await.expect("task")).await;
    assert_problem(
        answer("same").await.expect("task"),
        409,
        "request-in-progress",
    )
    .await;
    assert_problem(
        answer("other body").await.expect("task"),
        422,
        "idempotency-key-reused",
    )
    .await;
    let replay = answer("used").await.expect("task");
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.expect("body"), stored);
    let (fresh_order, _) = order_id_of(answer("fresh").await.expect("task")).await;
    assert_eq!(
        commits_of(&db, &[first, fresh_order]).await,
        vec![2],
        "one commit wrote both, the skipped row failing nothing"
    );
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(orders, 4, "the held one's, the used one's, first and fresh");

    // Once the batch is done, the same request is a replay of the first, another body a 422.
    let again = binary
        .post(&shared, &order_body(1, 1, 1))
        .await
        .expect("task");
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(order_id_of(again).await.0, first);
    let other = binary
        .post(&shared, &order_body(1, 1, 2))
        .await
        .expect("task");
    assert_problem(other, 422, "idempotency-key-reused").await;
}

/// Deletes `token`'s key, as a Redis restart would.
pub async fn forget(prefix: &str, token: &str) {
    let client = redis::Client::open(testkit::redis_url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    redis::cmd("DEL")
        .arg(format!("{prefix}idem:{token}"))
        .query_async::<()>(&mut conn)
        .await
        .expect("del");
}
