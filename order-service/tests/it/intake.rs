//! Order intake in batches, observed on the real binary, on either backend: its metrics are
//! its own there, so a test can wait until exactly its requests are queued behind a commit
//! that a transaction of the test holds up. The intake's batch-size histogram counts the
//! batches on both backends; on PostgreSQL, orders written by one commit also share their
//! `xmin`, which tells which orders went together.

use std::collections::{HashMap, HashSet};
use std::process::Child;
use std::time::Duration;

use platform::storage::Tx;
use reqwest::Response;
use serde_json::Value;
use testkit::{Backend, BackendDatabase};
use uuid::Uuid;

use crate::helpers::{assert_problem, eventually, order_body, store_outcome};

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread")]
    an_idle_service_writes_a_batch_of_one_at_once,
    three_times_the_cap_of_queued_requests_go_in_three_full_batches_each_answered_its_own,
    token_conflicts_inside_one_batch_are_settled_each_alone,
);

/// order-service as a process of its own, with its broker unreachable (outbox rows stay put).
pub struct Binary {
    pub child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

impl Binary {
    pub async fn start(db: &BackendDatabase, prefix: &str, port: u16, batch_max: usize) -> Self {
        Self::start_on(db.url(), prefix, port, batch_max).await
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
pub async fn hold_intake(
    binary: &Binary,
    db: &BackendDatabase,
) -> (Tx, tokio::task::JoinHandle<Response>) {
    let token = binary.issue_token().await;
    let body = order_body(1, 1, 1);
    let mut blocker = db.database().begin().await.expect("begin");
    store_outcome(blocker.conn(), &token, &body).await;
    let held = binary.post(&token, &body);
    eventually(Duration::from_secs(20), || async {
        let waiting = db.lock_waits("", "INSERT INTO idempotency_keys").await;
        (waiting > 0).then_some(())
    })
    .await;
    (blocker, held)
}

/// The number of orders of each commit, among orders whose ids are `ids`, in ascending order;
/// on PostgreSQL only (rows written together share `xmin`; MySQL shows a row's transaction to
/// no statement), `None` on MySQL.
async fn commits_of(db: &BackendDatabase, ids: &[Uuid]) -> Option<Vec<i64>> {
    let BackendDatabase::Postgres(db) = db else {
        return None;
    };
    let commits = sqlx::query_scalar(
        "SELECT count(*) FROM orders WHERE order_id = ANY($1) GROUP BY xmin::text ORDER BY 1",
    )
    .bind(ids)
    .fetch_all(&db.pool)
    .await
    .expect("commits");
    Some(commits)
}

/// The intake's batches so far and the requests they held, as its metrics count them.
async fn batches(binary: &Binary) -> (f64, f64) {
    let count = testkit::scrape_metric(&binary.base, "order_intake_batch_size_count").await;
    let sum = testkit::scrape_metric(&binary.base, "order_intake_batch_size_sum").await;
    (count, sum)
}

async fn order_id_of(response: Response) -> (Uuid, Value) {
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.expect("json");
    let id = Uuid::parse_str(body["order_id"].as_str().expect("order id")).expect("uuid");
    (id, body)
}

async fn an_idle_service_writes_a_batch_of_one_at_once(backend: Backend) {
    let db = database(backend, "orders_intake_one").await;
    let binary = Binary::start(&db, &testkit::redis_prefix(), testkit::free_port(), 4).await;
    let token = binary.issue_token().await;
    let (order_id, _) = order_id_of(
        binary
            .post(&token, &order_body(5, 1, 1))
            .await
            .expect("task"),
    )
    .await;
    assert_eq!(
        batches(&binary).await,
        (1.0, 1.0),
        "one commit, of one order"
    );
    if let Some(commits) = commits_of(&db, &[order_id]).await {
        assert_eq!(commits, vec![1]);
    }
}

async fn database(backend: Backend, prefix: &str) -> BackendDatabase {
    BackendDatabase::create(backend, prefix, order_service::migrators()).await
}

async fn three_times_the_cap_of_queued_requests_go_in_three_full_batches_each_answered_its_own(
    backend: Backend,
) {
    const CAP: usize = 4;
    let db = database(backend, "orders_intake_cap").await;
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
    // The held request's batch of one, then three full ones.
    let cap = CAP as f64;
    assert_eq!(batches(&binary).await, (4.0, 1.0 + 3.0 * cap));
    if let Some(commits) = commits_of(&db, &ids).await {
        assert_eq!(commits, vec![CAP as i64; 3]);
    }
    let (orders, outcomes, events) = (
        db.count("SELECT count(*) FROM orders").await,
        db.count("SELECT count(*) FROM idempotency_keys").await,
        db.count("SELECT count(*) FROM outbox").await,
    );
    // The held request's token had the test's order: it added nothing.
    assert_eq!(
        (orders, outcomes, events),
        (3 * CAP as i64 + 1, 3 * CAP as i64 + 1, 3 * CAP as i64)
    );
    let published: Option<String> = db
        .scalar(
            "SELECT string_agg(payload->'payload'->>'order_id', ',') FROM outbox",
            "SELECT GROUP_CONCAT(JSON_VALUE(payload, '$.payload.order_id')) FROM outbox",
        )
        .await;
    let published: HashSet<Uuid> = published
        .unwrap_or_default()
        .split(',')
        .map(|id| Uuid::parse_str(id).expect("an order id"))
        .collect();
    assert_eq!(published, ids.into_iter().collect::<HashSet<_>>());
}

async fn token_conflicts_inside_one_batch_are_settled_each_alone(backend: Backend) {
    let db = database(backend, "orders_intake_conflict").await;
    let prefix = testkit::redis_prefix();
    let binary = Binary::start(&db, &prefix, testkit::free_port(), 64).await;
    let shared = binary.issue_token().await;
    let used = binary.issue_token().await;
    let fresh = binary.issue_token().await;
    // `used` was placed already, and Redis forgot it: its request is claimed again and only
    // the database's unique key can tell.
    let used_body = order_body(3, 1, 1);
    let database = db.database();
    let mut conn = database.acquire().await.expect("conn");
    let stored = store_outcome(conn.conn(), &used, &used_body).await;
    drop(conn);
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
    // The held request's batch of one, then the five queued behind it in one.
    assert_eq!(batches(&binary).await, (2.0, 6.0));

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
    if let Some(commits) = commits_of(&db, &[first, fresh_order]).await {
        assert_eq!(
            commits,
            vec![2],
            "one commit wrote both, the skipped row failing nothing"
        );
    }
    assert_eq!(
        db.count("SELECT count(*) FROM orders").await,
        4,
        "the held one's, the used one's, first and fresh"
    );

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
        .arg(format!("{prefix}idem:{{{token}}}"))
        .query_async::<()>(&mut conn)
        .await
        .expect("del");
}
