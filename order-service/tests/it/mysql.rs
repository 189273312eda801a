//! order-service on MariaDB (docs/contract.md §2.1): the same service, started on a `mysql://`
//! URL, driven over HTTP and through its own RabbitMQ vhost. Each test has a MariaDB database
//! of its own (`testkit::mysql`), created by the service's start-up as it creates its own.

use std::time::Duration;

use order_service::config::Config;
use order_service::orders::payment::PaymentWindow;
use reqwest::Response;
use serde_json::{Value, json};
use shared::keys;
use testkit::mysql::TestMySqlDatabase;
use testkit::{AmqpProbe, TestVhost};
use tokio_util::sync::CancellationToken;

use crate::helpers::{assert_problem, eventually, order_body};

const WAIT: Duration = Duration::from_secs(15);

/// One order-service on its own MariaDB database, Redis prefix and vhost.
struct MySqlApp {
    base: String,
    db: TestMySqlDatabase,
    client: reqwest::Client,
    vhost: TestVhost,
    shutdown: CancellationToken,
}

impl MySqlApp {
    async fn spawn(configure: impl FnOnce(&mut Config)) -> Self {
        testkit::init_logs();
        let db = TestMySqlDatabase::create("orders_mysql", &order_service::MYSQL_MIGRATOR).await;
        let vhost = TestVhost::create();
        let mut config = Config {
            http_addr: "127.0.0.1:0".parse().expect("address"),
            database_urls: vec![db.url.clone()],
            redis_url: testkit::redis_url(),
            redis_key_prefix: testkit::redis_prefix(),
            amqp_urls: vec![vhost.url.clone()],
            admin_token: Some("test-admin-token".into()),
            inventory_url: "http://127.0.0.1:1".into(),
            reconcile_after: Duration::from_secs(3600),
            reconcile_every: Duration::from_secs(3600),
            ..Config::default()
        };
        configure(&mut config);
        let listener = tokio::net::TcpListener::bind(config.http_addr)
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let state = order_service::build_state(config)
            .await
            .expect("state on MySQL");
        assert_eq!(state.db.backend(), platform::storage::Backend::MySql);
        let shutdown = CancellationToken::new();
        tokio::spawn(order_service::serve(state, listener, shutdown.clone()));
        Self {
            base,
            db,
            client: reqwest::Client::new(),
            vhost,
            shutdown,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn token(&self) -> String {
        let response = self
            .client
            .post(self.url("/idempotency-tokens"))
            .send()
            .await
            .expect("issue");
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.expect("json");
        body["token"].as_str().expect("token").to_owned()
    }

    async fn post_order(&self, token: &str, body: &Value) -> Response {
        self.client
            .post(self.url("/orders"))
            .header("Idempotency-Key", token)
            .json(body)
            .send()
            .await
            .expect("request")
    }

    async fn create_order(&self, body: &Value) -> Value {
        let response = self.post_order(&self.token().await, body).await;
        assert_eq!(response.status(), 202);
        response.json().await.expect("json")
    }

    async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.expect("get")
    }

    async fn order(&self, order_id: &str) -> Value {
        self.get(&format!("/orders/{order_id}"))
            .await
            .json()
            .await
            .expect("json")
    }

    async fn status_becomes(&self, order_id: &str, status: &str) -> Value {
        eventually(WAIT, || async {
            let order = self.order(order_id).await;
            (order["status"] == status).then_some(order)
        })
        .await
    }

    async fn post(&self, path: &str) -> Response {
        self.client.post(self.url(path)).send().await.expect("post")
    }

    async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.db.pool)
            .await
            .expect(sql)
    }

    async fn probe(&self) -> AmqpProbe {
        AmqpProbe::connect(&self.vhost.url).await
    }
}

impl Drop for MySqlApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn id(order: &Value) -> String {
    order["order_id"].as_str().expect("order_id").to_owned()
}

#[tokio::test]
async fn an_order_is_placed_once_per_token_published_and_settled() {
    let app = MySqlApp::spawn(|_| {}).await;
    let token = app.token().await;
    let body = order_body(1, 1001, 2);
    let first = app.post_order(&token, &body).await;
    assert_eq!(first.status(), 202);
    let first_body = first.bytes().await.expect("body");
    let replay = app.post_order(&token, &body).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.expect("body"), first_body);
    let other = app.post_order(&token, &order_body(1, 1001, 3)).await;
    assert_problem(other, 422, "idempotency-key-reused").await;
    assert_eq!(app.count("SELECT COUNT(*) FROM orders").await, 1);

    let order: Value = serde_json::from_slice(&first_body).expect("json");
    let order_id = id(&order);
    let stored = app.order(&order_id).await;
    assert_eq!(stored["status"], "PENDING");
    assert_eq!(stored["amount"], order["amount"], "NUMERIC kept exactly");
    assert_eq!(
        stored["created_at"], order["created_at"],
        "microseconds kept"
    );

    let probe = app.probe().await;
    let created = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    let created = created
        .first()
        .expect("order.created published by the relay");
    assert_eq!(created.routing_key, "order.created");
    assert_eq!(created.body["payload"]["order_id"], order_id.as_str());

    let reserved = json!({"order_id": order_id, "items": order["items"]});
    probe
        .publish_event(keys::INVENTORY_EXCHANGE, "inventory.reserved", reserved)
        .await;
    let confirmed = app.status_becomes(&order_id, "CONFIRMED").await;
    assert_eq!(confirmed["rejection_reason"], Value::Null);
    eventually(WAIT, || async {
        let recorded = app.count("SELECT COUNT(*) FROM processed_messages").await;
        (recorded == 1).then_some(())
    })
    .await;

    let cancelled = app.post(&format!("/orders/{order_id}/cancel")).await;
    assert_eq!(cancelled.status(), 200);
    let cancelled: Value = cancelled.json().await.expect("json");
    assert_eq!(cancelled["status"], "CANCELLED");
    let released = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(
        released
            .first()
            .expect("order.cancelled published")
            .routing_key,
        "order.cancelled"
    );
    let again = app.post(&format!("/orders/{order_id}/cancel")).await;
    assert_eq!(
        again.status(),
        200,
        "a cancelled order is returned as it is"
    );
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE routing_key = 'order.cancelled'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_rejection_and_a_late_duplicate_are_settled_once() {
    let app = MySqlApp::spawn(|_| {}).await;
    let order_id = id(&app.create_order(&order_body(2, 1001, 5)).await);
    let probe = app.probe().await;
    let rejected = json!({"order_id": order_id, "reason": "insufficient_stock"});
    let (event_id, envelope) = testkit::event_envelope("inventory.rejected", rejected);
    for _ in 0..2 {
        probe
            .publish(
                keys::INVENTORY_EXCHANGE,
                "inventory.rejected",
                envelope.to_string().as_bytes(),
                Some(&event_id),
            )
            .await;
    }
    let order = app.status_becomes(&order_id, "REJECTED").await;
    assert_eq!(order["rejection_reason"], "insufficient_stock");
    // A reservation arriving after the rejection changes nothing.
    probe
        .publish_event(
            keys::INVENTORY_EXCHANGE,
            "inventory.reserved",
            json!({"order_id": order_id, "items": [{"product_id": 1001, "quantity": 5}]}),
        )
        .await;
    eventually(WAIT, || async {
        let recorded = app.count("SELECT COUNT(*) FROM processed_messages").await;
        (recorded == 2).then_some(())
    })
    .await;
    assert_eq!(app.order(&order_id).await["status"], "REJECTED");
}

#[tokio::test]
async fn a_payment_window_confirms_while_open_and_expires_when_closed() {
    let app = MySqlApp::spawn(|c| {
        c.payment_window = PaymentWindow::from_secs(2);
        c.payment_expiry_every = Duration::from_millis(200);
    })
    .await;
    let paid = id(&app.create_order(&order_body(3, 1001, 1)).await);
    let unpaid = id(&app.create_order(&order_body(3, 1001, 1)).await);
    let probe = app.probe().await;
    for order_id in [&paid, &unpaid] {
        probe
            .publish_event(
                keys::INVENTORY_EXCHANGE,
                "inventory.reserved",
                json!({"order_id": order_id, "items": [{"product_id": 1001, "quantity": 1}]}),
            )
            .await;
    }
    let waiting = app.status_becomes(&paid, "AWAITING_PAYMENT").await;
    assert!(waiting["payment_due_at"].is_string());
    let confirmed = app.post(&format!("/orders/{paid}/confirm")).await;
    assert_eq!(confirmed.status(), 200);
    assert_eq!(app.order(&paid).await["status"], "CONFIRMED");
    app.status_becomes(&unpaid, "EXPIRED").await;
    let late = app.post(&format!("/orders/{unpaid}/confirm")).await;
    assert_eq!(late.status().as_u16() / 100, 4, "a closed window refuses");
    assert_eq!(
        app.count("SELECT COUNT(*) FROM outbox WHERE routing_key = 'order.cancelled'")
            .await,
        1,
        "the expired order's stock is asked back once"
    );
}

#[tokio::test]
async fn pages_run_newest_first_and_bad_parameters_are_422() {
    let app = MySqlApp::spawn(|_| {}).await;
    let mut placed = Vec::new();
    for _ in 0..3 {
        placed.push(id(&app.create_order(&order_body(4, 1001, 1)).await));
    }
    let mut seen = Vec::new();
    let mut path = "/orders?limit=2".to_owned();
    loop {
        let page: Value = app.get(&path).await.json().await.expect("json");
        for item in page["items"].as_array().expect("items") {
            seen.push(id(item));
        }
        match page["next"].as_str() {
            Some(cursor) => path = format!("/orders?limit=2&after={cursor}"),
            None => break,
        }
    }
    placed.reverse();
    assert_eq!(seen, placed, "newest first, every order once");
    let mine: Value = app
        .get("/orders?user_id=4&status=PENDING")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(mine["items"].as_array().expect("items").len(), 3);
    for bad in [
        "/orders?status=%00",
        "/orders?status=PENDING%00",
        "/orders?limit=0",
    ] {
        assert_problem(app.get(bad).await, 422, "validation-failed").await;
    }
    let control = app
        .post_order(
            &app.token().await,
            &json!({"user_id": 4, "items": [{"product_id": 1, "quantity": 1}], "amount": "1\u{0}"}),
        )
        .await;
    assert_eq!(
        control.status(),
        422,
        "a NUL is refused before the database"
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM orders").await, 3);
}

#[tokio::test]
async fn the_token_secret_is_shared_by_instances_on_one_database() {
    let first = MySqlApp::spawn(|_| {}).await;
    let token = first.token().await;
    // A second instance on the same database reads the stored secret: the token is its own.
    let db_url = first.db.url.clone();
    let second_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", second_listener.local_addr().expect("address"));
    let config = Config {
        http_addr: "127.0.0.1:0".parse().expect("address"),
        database_urls: vec![db_url],
        redis_url: testkit::redis_url(),
        redis_key_prefix: testkit::redis_prefix(),
        amqp_urls: vec![testkit::NO_BROKER.into()],
        inventory_url: "http://127.0.0.1:1".into(),
        ..Config::default()
    };
    let state = order_service::build_state(config)
        .await
        .expect("second instance");
    let stop = CancellationToken::new();
    tokio::spawn(order_service::serve(state, second_listener, stop.clone()));
    let response = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", &token)
        .json(&order_body(5, 1001, 1))
        .send()
        .await
        .expect("request");
    assert_eq!(
        response.status(),
        202,
        "the other instance's token is valid here"
    );
    stop.cancel();
}
