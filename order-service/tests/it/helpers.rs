//! `TestApp::spawn`: one isolated order-service per test.

use std::time::Duration;

use order_service::config::Config;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use testkit::{AmqpProbe, TestDatabase, TestVhost};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub struct TestApp {
    pub base: String,
    pub db: TestDatabase,
    pub redis_prefix: String,
    pub client: reqwest::Client,
    /// The app's own RabbitMQ vhost, when it has a broker.
    pub vhost: Option<TestVhost>,
    shutdown: CancellationToken,
}

/// The configuration of a service on this test's database and Redis prefix, with its broker
/// unreachable and reconciliation idle until a test changes them.
pub fn config_for(db: &TestDatabase, redis_prefix: &str) -> Config {
    Config {
        http_addr: "127.0.0.1:0".parse().expect("address"),
        database_urls: vec![db.url.clone()],
        database_max_connections: 10,
        redis_url: testkit::redis_url(),
        redis_sentinels: None,
        redis_key_prefix: redis_prefix.to_owned(),
        redis_timeout: platform::storage::redis::DEFAULT_TIMEOUT,
        // Nothing listens on port 1: the broker stays down unless a test sets a vhost.
        amqp_urls: vec!["amqp://guest:guest@127.0.0.1:1/%2f".into()],
        admin_token: Some("test-admin-token".into()),
        inventory_url: "http://127.0.0.1:1".into(),
        idempotency_token_ttl: Duration::from_secs(3600),
        idempotency_token_secret: None,
        request_timeout: Duration::from_secs(10),
        reconcile_after: Duration::from_secs(3600),
        reconcile_every: Duration::from_secs(3600),
        intake_batch_max: 64,
        messaging: Default::default(),
        rate_limit: Default::default(),
        shutdown_drain: Duration::ZERO,
        identity: Default::default(),
        cors: Default::default(),
        tls: Default::default(),
    }
}

impl TestApp {
    /// A service whose broker is unreachable (HTTP-only tests need none).
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// A service with its own RabbitMQ vhost: relay, consumer and topology all run.
    pub async fn spawn_with_broker(configure: impl FnOnce(&mut Config)) -> Self {
        let vhost = TestVhost::create();
        let url = vhost.url.clone();
        let mut app = Self::spawn_with(|c| {
            c.amqp_urls = vec![url];
            configure(c);
        })
        .await;
        app.vhost = Some(vhost);
        app
    }

    /// A raw AMQP client on the app's vhost (topology declared).
    pub async fn probe(&self) -> AmqpProbe {
        AmqpProbe::connect(&self.vhost.as_ref().expect("spawned with a broker").url).await
    }

    pub async fn spawn_with(configure: impl FnOnce(&mut Config)) -> Self {
        testkit::init_logs();
        let db = TestDatabase::create("orders", &order_service::MIGRATOR).await;
        let redis_prefix = testkit::redis_prefix();
        let mut config = config_for(&db, &redis_prefix);
        configure(&mut config);
        let listener = tokio::net::TcpListener::bind(config.http_addr)
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = order_service::build_state(config).await.expect("state");
        let shutdown = CancellationToken::new();
        tokio::spawn(order_service::serve(state, listener, shutdown.clone()));
        Self {
            base,
            db,
            redis_prefix,
            client: reqwest::Client::new(),
            vhost: None,
            shutdown,
        }
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
        let sql = format!("SELECT count(*) FROM {table}");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&self.db.pool)
            .await
            .expect("count")
    }

    /// Deletes every Redis key of this app, as a Redis restart (which keeps nothing) would.
    pub async fn forget_redis(&self) {
        let client = redis::Client::open(testkit::redis_url()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
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
        let client = redis::Client::open(testkit::redis_url()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let key = format!("{}idem:{token}", self.redis_prefix);
        redis::cmd("SET")
            .arg(key)
            .arg(state)
            .arg("KEEPTTL")
            .query_async::<()>(&mut conn)
            .await
            .expect("set");
    }

    pub async fn redis_key_exists(&self, token: &str) -> bool {
        let client = redis::Client::open(testkit::redis_url()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let key = format!("{}idem:{token}", self.redis_prefix);
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<bool>(&mut conn)
            .await
            .expect("exists")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn order_body(user_id: i64, product_id: i64, quantity: i64) -> Value {
    json!({"user_id": user_id, "items": [{"product_id": product_id, "quantity": quantity}], "amount": 10.5})
}

/// Asserts a problem+json answer with `status` and `slug`; returns the body.
pub async fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.expect("problem body");
    assert_eq!(body["type"], format!("/problems/{slug}"), "{body}");
    assert_eq!(body["status"], status);
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{body}"
    );
    body
}

pub use testkit::eventually;

pub fn random_uuid() -> String {
    Uuid::new_v4().to_string()
}
