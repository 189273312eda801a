//! `TestApp::spawn`: one isolated order-service per test.

use std::time::Duration;

use order_service::config::Config;
use platform::storage::Conn;
use redis::aio::MultiplexedConnection;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres};
use testkit::{AmqpProbe, Backend, BackendDatabase, TestDatabase, TestVhost};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use crate::config::config_for;

pub struct TestApp {
    pub base: String,
    /// The service's own database, for checks behind the API.
    pub database: BackendDatabase,
    pub redis_prefix: String,
    /// The Redis the app was configured with (a test may give it a private one).
    redis_url: String,
    pub client: reqwest::Client,
    /// The app's own RabbitMQ vhost, when it has a broker.
    pub vhost: Option<TestVhost>,
    shutdown: CancellationToken,
}

impl TestApp {
    /// A service whose broker is unreachable (HTTP-only tests need none).
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// A service with its own RabbitMQ vhost: relay, consumer and topology all run.
    pub async fn spawn_with_broker(configure: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_with_broker_on(Backend::Postgres, configure).await
    }

    /// A raw AMQP client on the app's vhost (topology declared).
    pub async fn probe(&self) -> AmqpProbe {
        AmqpProbe::connect(&self.vhost.as_ref().expect("spawned with a broker").url).await
    }

    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_on(Backend::Postgres, configure).await
    }

    /// A service (broker unreachable unless `configure` names one) on a database of
    /// `backend`.
    pub async fn spawn_on(backend: Backend, configure: impl FnOnce(&mut Config)) -> Self {
        Self::start(backend, configure, false).await.0
    }

    /// [`TestApp::spawn_with_broker`] on a database of `backend`.
    pub async fn spawn_with_broker_on(
        backend: Backend,
        configure: impl FnOnce(&mut Config),
    ) -> Self {
        let vhost = TestVhost::create();
        let url = vhost.url.clone();
        let mut app = Self::spawn_on(backend, |c| {
            c.amqp_urls = vec![url];
            configure(c);
        })
        .await;
        app.vhost = Some(vhost);
        app
    }

    /// The service's PostgreSQL database, for the tests that read or change its rows with
    /// PostgreSQL's own statements (they spawn on PostgreSQL).
    pub fn db(&self) -> &TestDatabase {
        match &self.database {
            BackendDatabase::Postgres(db) => db,
            BackendDatabase::MySql(_) => panic!("a PostgreSQL-only check on a MySQL app"),
        }
    }

    /// A service (broker unreachable) whose requests and loops use a pool of one connection,
    /// held by the test through the one returned: until it is dropped, every use of the pool
    /// waits out a 200 ms acquire timeout, as on an exhausted pool. `db` stays the test's.
    pub async fn spawn_saturated() -> (Self, PoolConnection<Postgres>) {
        let (app, held) = Self::start(Backend::Postgres, |_| {}, true).await;
        (app, held.expect("a held connection"))
    }

    async fn start(
        backend: Backend,
        configure: impl FnOnce(&mut Config),
        saturated: bool,
    ) -> (Self, Option<PoolConnection<Postgres>>) {
        testkit::init_logs();
        let database = BackendDatabase::create(backend, "orders", order_service::migrators()).await;
        let redis_prefix = testkit::redis_prefix();
        let mut config = config_for(&database, &redis_prefix);
        configure(&mut config);
        let redis_url = config.redis_url.clone();
        let listener = tokio::net::TcpListener::bind(config.http_addr)
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let mut state = order_service::build_state(config).await.expect("state");
        let mut held = None;
        if saturated {
            let (pool, connection) = saturated_pool(database.url()).await;
            state.db = pool.into();
            held = Some(connection);
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(order_service::serve(state, listener, shutdown.clone()));
        let app = Self {
            base,
            database,
            redis_prefix,
            redis_url,
            client: reqwest::Client::new(),
            vhost: None,
            shutdown,
        };
        (app, held)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn issue_token(&self) -> String {
        let response = self
            .client
            .post(self.url("/idempotency-tokens"))
            .send()
            .await
            .expect("issue");
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.expect("json");
        body["token"].as_str().expect("token").to_owned()
    }

    /// `POST /orders` with a raw body and an optional key.
    pub async fn post_order_raw(
        &self,
        key: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url("/orders"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("request")
    }

    pub async fn post_order(&self, key: &str, body: &Value) -> Response {
        self.post_order_raw(Some(key), body.to_string()).await
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
    }

    /// Creates an order with a fresh token; returns its JSON.
    pub async fn create_order(&self, body: &Value) -> Value {
        let token = self.issue_token().await;
        let response = self.post_order(&token, body).await;
        assert_eq!(response.status(), 202);
        response.json().await.expect("json")
    }

    pub async fn order_status(&self, order_id: &str) -> String {
        let order: Value = self
            .get(&format!("/orders/{order_id}"))
            .await
            .json()
            .await
            .expect("json");
        order["status"].as_str().expect("status").to_owned()
    }

    /// Waits until the order reaches `status`.
    pub async fn wait_for_status(&self, order_id: &str, status: &str) {
        eventually(Duration::from_secs(10), || async {
            (self.order_status(order_id).await == status).then_some(())
        })
        .await;
    }

    pub async fn cancel(&self, order_id: &str) -> Response {
        self.client
            .post(self.url(&format!("/orders/{order_id}/cancel")))
            .send()
            .await
            .expect("cancel")
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.database
            .count(&format!("SELECT count(*) FROM {table}"))
            .await
    }

    /// A connection to the app's Redis.
    async fn redis(&self) -> MultiplexedConnection {
        redis::Client::open(self.redis_url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis")
    }

    /// The Redis key of `token`'s state.
    fn token_key(&self, token: &str) -> String {
        format!("{}idem:{{{token}}}", self.redis_prefix)
    }

    /// Deletes every Redis key of this app, as a Redis restart (which keeps nothing) would.
    pub async fn forget_redis(&self) {
        let mut conn = self.redis().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.redis_prefix))
            .query_async(&mut conn)
            .await
            .expect("keys");
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(keys)
                .query_async::<()>(&mut conn)
                .await
                .expect("del");
        }
    }

    /// Overwrites a token's Redis state (keeping its TTL), to stage what a crash leaves.
    pub async fn set_token_state(&self, token: &str, state: &str) {
        redis::cmd("SET")
            .arg(self.token_key(token))
            .arg(state)
            .arg("KEEPTTL")
            .query_async::<()>(&mut self.redis().await)
            .await
            .expect("set");
    }

    /// Waits until `token`'s first response is cached in Redis and returns that state. The
    /// intake writes it after answering (decision 0065): a test that changes the token's Redis
    /// state after placing its order waits for this first, or the late write can undo it.
    pub async fn await_cached(&self, token: &str) -> String {
        eventually(Duration::from_secs(10), || async {
            self.token_state(token)
                .await
                .filter(|state| state.starts_with("done:"))
        })
        .await
    }

    /// A token's Redis state (`issued:…`, `inflight:…`, `done:…`), if Redis has it.
    pub async fn token_state(&self, token: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(self.token_key(token))
            .query_async::<Option<String>>(&mut self.redis().await)
            .await
            .expect("get")
    }

    pub async fn redis_key_exists(&self, token: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(self.token_key(token))
            .query_async::<bool>(&mut self.redis().await)
            .await
            .expect("exists")
    }
}

/// A pool of one connection to `url` whose acquires give up after 200 ms, and that
/// connection, held. Opening it may itself outlast 200 ms on a busy machine: tried again
/// until it opens (`testkit::saturated_pool` would fail the test instead).
pub async fn saturated_pool(url: &str) -> (PgPool, PoolConnection<Postgres>) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy(url)
        .expect("a PostgreSQL URL");
    let held = eventually(Duration::from_secs(10), || async {
        pool.acquire().await.ok()
    })
    .await;
    (pool, held)
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn order_body(user_id: i64, product_id: i64, quantity: i64) -> Value {
    json!({"user_id": user_id, "items": [{"product_id": product_id, "quantity": quantity}], "amount": 10.5})
}

pub use testkit::{assert_problem, eventually};

pub fn random_uuid() -> String {
    Uuid::new_v4().to_string()
}

/// Writes a committed-looking order and outcome for `token` in `conn` (a transaction the test
/// holds open, or commits at once), on either backend: the stored first response is
/// `{"order_id": …}`.
pub async fn store_outcome(mut conn: Conn<'_>, token: &str, body: &Value) -> String {
    let backend = match conn {
        Conn::Postgres(_) => Backend::Postgres,
        Conn::MySql(_) => Backend::MySql,
    };
    let id = Uuid::new_v4();
    let order_id = testkit::uuid_literal(backend, &id.to_string());
    let first = json!({"order_id": id, "stored": true}).to_string();
    // The body has no quote or backslash to escape: a JSON object of a uuid and a boolean.
    let first_bytes = match backend {
        Backend::Postgres => format!("'{first}'::bytea"),
        Backend::MySql => format!("'{first}'"),
    };
    let order = format!(
        "INSERT INTO orders (order_id, user_id, items, amount) \
         VALUES ({order_id}, 1, '[{{\"product_id\": 1, \"quantity\": 1}}]', 1)"
    );
    testkit::execute_on(conn.reborrow(), &order).await;
    let outcome = format!(
        "INSERT INTO idempotency_keys \
         (token, fingerprint, order_id, response_status, response_body) \
         VALUES ({}, '{}', {order_id}, 202, {first_bytes})",
        testkit::uuid_literal(backend, token),
        order_service::tokens::fingerprint::of_json(body),
    );
    testkit::execute_on(conn, &outcome).await;
    first
}
