//! The service on MariaDB: `build_state` on a MySQL `DATABASE_URL`, driven over HTTP like the
//! PostgreSQL tests, so that every answer below comes from the statements of `inventory_mysql`
//! (products, restocks, batches of deductions and holds' tries, ends of holds, the expiry
//! sweep, order events). Each check would fail on a MySQL path that wrote the wrong rows, lost
//! a guard or mapped an error to another answer than PostgreSQL's.

use std::time::Duration;

use inventory_service::Config;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use shared::keys;
use sqlx::MySqlPool;
use testkit::mysql::TestMySqlDatabase;
use testkit::{AmqpProbe, TestVhost, assert_problem, eventually, redis_prefix, redis_url};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, deduction_body, publish_order_created};
use crate::holds::hold_body;

/// A running service on a MariaDB database of its own, stopped when dropped.
struct MySqlApp {
    address: String,
    admin: reqwest::Client,
    vhost_url: String,
    shutdown: CancellationToken,
}

impl Drop for MySqlApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A MariaDB database and a vhost that one or more instances share.
struct Backing {
    db: TestMySqlDatabase,
    vhost: TestVhost,
}

impl Backing {
    async fn create() -> Self {
        testkit::init_logs();
        Self {
            db: TestMySqlDatabase::create("inventory_mysql", &inventory_service::MYSQL_MIGRATOR)
                .await,
            vhost: TestVhost::create(),
        }
    }

    fn pool(&self) -> &MySqlPool {
        &self.db.pool
    }

    /// An instance on this database, with a Redis key prefix of its own unless `prefix` is
    /// given, and the test defaults changed by `customize`.
    async fn spawn(&self, prefix: Option<&str>, customize: impl FnOnce(&mut Config)) -> MySqlApp {
        let mut config = Config {
            http_addr: "127.0.0.1:0".parse().expect("an address"),
            database_urls: vec![self.db.url.clone()],
            database_max_connections: 10,
            redis_url: redis_url(),
            redis_key_prefix: prefix.map_or_else(redis_prefix, str::to_owned),
            amqp_urls: vec![self.vhost.url.clone()],
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            ..Config::default()
        };
        customize(&mut config);
        let state = inventory_service::build_state(config.clone())
            .await
            .expect("the service starts on MySQL");
        assert_eq!(state.db.backend(), platform::storage::Backend::MySql);
        let listener = tokio::net::TcpListener::bind(config.http_addr)
            .await
            .expect("a free port");
        let address = format!("http://{}", listener.local_addr().expect("bound"));
        let shutdown = CancellationToken::new();
        tokio::spawn(inventory_service::serve(state, listener, shutdown.clone()));
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {ADMIN_TOKEN}")).expect("a header value"),
        );
        MySqlApp {
            address,
            admin: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("a client"),
            vhost_url: self.vhost.url.clone(),
            shutdown,
        }
    }

    async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl MySqlApp {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.admin
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    async fn post_raw(&self, path: &str, body: String) -> reqwest::Response {
        self.admin
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.admin
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    async fn create_product(&self, product_id: i64, stock: i64) {
        let name = format!("Product {product_id}");
        let body = json!({"product_id": product_id, "name": name, "stock": stock});
        let response = self.post("/products", &body).await;
        assert_eq!(response.status(), 201, "creating product {product_id}");
    }

    async fn product(&self, product_id: i64) -> Value {
        let response = self.get(&format!("/products/{product_id}")).await;
        assert_eq!(response.status(), 200, "reading product {product_id}");
        response.json().await.expect("a product")
    }

    /// A product's `(stock, held, version)`.
    async fn stock(&self, product_id: i64) -> (i64, i64, i64) {
        let product = self.product(product_id).await;
        let number = |field: &str| product[field].as_i64().expect("a number");
        (number("stock"), number("held"), number("version"))
    }

    async fn restock(&self, product_id: i64, quantity: i64, key: &str) -> reqwest::Response {
        self.admin
            .post(self.url(&format!("/products/{product_id}/restock")))
            .header("Idempotency-Key", key)
            .json(&json!({"quantity": quantity}))
            .send()
            .await
            .expect("POST /products/{id}/restock")
    }

    async fn deduct(&self, deduction_id: &str, items: &[(i64, i64)]) -> reqwest::Response {
        self.post("/deductions", &deduction_body(deduction_id, items))
            .await
    }

    async fn hold(&self, hold_id: &str, items: &[(i64, i64)], ttl: i64) -> reqwest::Response {
        self.post("/holds", &hold_body(hold_id, items, Some(ttl)))
            .await
    }

    async fn end_hold(&self, hold_id: &str, step: &str) -> reqwest::Response {
        self.admin
            .post(self.url(&format!("/holds/{hold_id}/{step}")))
            .send()
            .await
            .expect("POST /holds/{id}/{step}")
    }

    /// [`MySqlApp::end_hold`] that must answer 200: the hold's state and items.
    async fn ended(&self, hold_id: &str, step: &str) -> (String, Value) {
        let response = self.end_hold(hold_id, step).await;
        assert_eq!(response.status(), 200, "{step} of {hold_id}");
        let hold: Value = response.json().await.expect("a hold");
        (
            hold["state"].as_str().expect("a state").to_owned(),
            hold["items"].clone(),
        )
    }
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn products_and_restocks_on_mysql_keep_postgresqls_answers() {
    let backing = Backing::create().await;
    let app = backing.spawn(None, |_| {}).await;
    app.create_product(1, 10).await;
    let product = app.product(1).await;
    assert_eq!(
        (
            &product["name"],
            &product["stock"],
            &product["held"],
            &product["version"]
        ),
        (&json!("Product 1"), &json!(10), &json!(0), &json!(0))
    );
    // The duplicate of the primary key (`PRIMARY` on MySQL) is PostgreSQL's products_pkey.
    let again = app
        .post(
            "/products",
            &json!({"product_id": 1, "name": "Other", "stock": 1}),
        )
        .await;
    assert_problem(again, 409, "product-exists").await;
    assert_eq!(app.product(1).await["name"], "Product 1");
    assert_problem(app.get("/products/2").await, 404, "not-found").await;

    // One key, two requests: one effect, the first response's bytes twice.
    let first = app.restock(1, 5, "k-1").await;
    assert_eq!(first.status(), 200);
    assert!(!replayed(&first));
    let first = first.bytes().await.expect("body");
    let again = app.restock(1, 5, "k-1").await;
    assert_eq!(again.status(), 200);
    assert!(replayed(&again), "a replay says so");
    assert_eq!(again.bytes().await.expect("body"), first);
    assert_eq!(app.stock(1).await, (15, 0, 1));
    let reused = app.restock(1, 6, "k-1").await;
    assert_problem(reused, 422, "idempotency-key-reused").await;
    // Keys compare byte by byte, as in PostgreSQL: another case is another key.
    assert_eq!(app.restock(1, 1, "K-1").await.status(), 200);
    assert_problem(app.restock(9, 1, "k-9").await, 404, "not-found").await;
    assert_eq!(app.stock(1).await, (16, 0, 2));
    assert_eq!(backing.count("SELECT COUNT(*) FROM restocks").await, 2);

    app.create_product(2, 0).await;
    let page: Value = app
        .get("/products?limit=1")
        .await
        .json()
        .await
        .expect("a page");
    assert_eq!(page["items"][0]["product_id"], 1);
    let next = page["next"].as_str().expect("a next page");
    let page: Value = app
        .get(&format!("/products?limit=1&after={next}"))
        .await
        .json()
        .await
        .expect("a page");
    assert_eq!(page["items"][0]["product_id"], 2);
}

#[tokio::test]
async fn a_nul_or_another_control_character_is_a_422_on_mysql_never_a_500() {
    let backing = Backing::create().await;
    let app = backing.spawn(None, |_| {}).await;
    app.create_product(1, 10).await;
    let item = json!([{"product_id": 1, "quantity": 1}]);
    for (path, body) in [
        (
            "/products",
            json!({"product_id": 2, "name": "nul\u{0}", "stock": 1}),
        ),
        (
            "/deductions",
            json!({"deduction_id": "d\u{0}", "items": item}),
        ),
        ("/holds", json!({"hold_id": "h\u{0}", "items": item})),
    ] {
        let response = app.post_raw(path, body.to_string()).await;
        assert_problem(response, 422, "validation-failed").await;
    }
    for path in ["/holds/h%00", "/products?after=1%00"] {
        assert_problem(app.get(path).await, 422, "validation-failed").await;
    }
    assert_problem(
        app.end_hold("h%00", "cancel").await,
        422,
        "validation-failed",
    )
    .await;
    let response = app
        .admin
        .post(app.url("/products/1/restock"))
        .header("Idempotency-Key", "k\t1")
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .expect("POST");
    assert_problem(response, 422, "validation-failed").await;
    assert_eq!(app.stock(1).await, (10, 0, 0));
    for table in [
        "SELECT COUNT(*) FROM deductions",
        "SELECT COUNT(*) FROM holds",
        "SELECT COUNT(*) FROM restocks",
    ] {
        assert_eq!(backing.count(table).await, 0, "{table}");
    }
    assert_problem(app.get("/products/2").await, 404, "not-found").await;
}

#[tokio::test]
async fn deductions_on_mysql_apply_once_refuse_whole_and_replay() {
    let backing = Backing::create().await;
    let app = backing.spawn(None, |_| {}).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;

    let first = app.deduct("d-1", &[(2, 4), (1, 3)]).await;
    assert_eq!(first.status(), 200);
    assert!(!replayed(&first));
    let first = first.bytes().await.expect("body");
    assert_eq!(
        serde_json::from_slice::<Value>(&first).expect("json"),
        json!({"deduction_id": "d-1", "status": "APPLIED", "items": [
            {"product_id": 1, "quantity": 3}, {"product_id": 2, "quantity": 4}
        ]})
    );
    assert_eq!(
        (app.stock(1).await, app.stock(2).await),
        ((7, 0, 1), (6, 0, 1))
    );

    // The same id and items: the first body again, nothing deducted.
    let again = app.deduct("d-1", &[(1, 3), (2, 4)]).await;
    assert_eq!(again.status(), 200);
    assert!(replayed(&again));
    assert_eq!(again.bytes().await.expect("body"), first);
    // The same id with other items: refused, nothing deducted.
    assert_problem(
        app.deduct("d-1", &[(1, 1)]).await,
        422,
        "idempotency-key-reused",
    )
    .await;
    // Ids compare byte by byte: another case is another deduction.
    assert_eq!(app.deduct("D-1", &[(1, 1)]).await.status(), 200);
    assert_eq!(
        (app.stock(1).await, app.stock(2).await),
        ((6, 0, 2), (6, 0, 1))
    );

    // Product 1 could give 2, product 2 cannot give 7: neither changes, and the refusal is
    // recorded and replayed even once the stock is there.
    let short = assert_problem(
        app.deduct("d-short", &[(1, 2), (2, 7)]).await,
        409,
        "insufficient-stock",
    )
    .await;
    assert_eq!(
        (app.stock(1).await, app.stock(2).await),
        ((6, 0, 2), (6, 0, 1))
    );
    assert_eq!(app.restock(2, 10, "more").await.status(), 200);
    let again = app.deduct("d-short", &[(1, 2), (2, 7)]).await;
    assert!(replayed(&again));
    assert_eq!(
        assert_problem(again, 409, "insufficient-stock").await,
        short
    );
    assert_problem(
        app.deduct("d-ghost", &[(1, 1), (42, 1)]).await,
        404,
        "unknown-product",
    )
    .await;
    assert_eq!(
        (app.stock(1).await, app.stock(2).await),
        ((6, 0, 2), (16, 0, 2))
    );
    assert_eq!(
        backing
            .count("SELECT COUNT(*) FROM deductions WHERE status = 'APPLIED'")
            .await,
        2
    );
    assert_eq!(
        backing
            .count("SELECT COUNT(*) FROM deductions WHERE status = 'REJECTED'")
            .await,
        2
    );
}

/// Sends one-unit deductions `ids` of `product` at once, spread over `apps`; a 503 `busy`
/// (lost races past the retry budget) is sent again with the same id, as a client does.
async fn stampede(apps: &[&MySqlApp], product: i64, ids: &[String]) -> Vec<u16> {
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let app = apps[i % apps.len()];
            let request = app
                .admin
                .post(app.url("/deductions"))
                .json(&deduction_body(id, &[(product, 1)]));
            tokio::spawn(async move {
                loop {
                    let attempt = request.try_clone().expect("a JSON request clones");
                    let status = attempt.send().await.expect("POST /deductions").status();
                    if status != StatusCode::SERVICE_UNAVAILABLE {
                        return status.as_u16();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("the request task finishes"));
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deductions_on_mysql_never_oversell() {
    let backing = Backing::create().await;
    let app = backing.spawn(None, |_| {}).await;
    app.create_product(1, 10).await;
    let ids: Vec<String> = (0..20).map(|i| format!("one-{i}")).collect();
    let statuses = stampede(&[&app], 1, &ids).await;
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (10, 10), "statuses: {statuses:?}");
    assert_eq!(app.stock(1).await.0, 0);
    assert_eq!(
        backing
            .count("SELECT COUNT(*) FROM deductions WHERE status = 'APPLIED'")
            .await,
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_without_a_shared_lock_never_oversell_on_mysql() {
    // Each instance has Redis keys of its own, so their batches never wait for each other:
    // only the conditional update (versions, stock >= 0) stands between them and overselling.
    let backing = Backing::create().await;
    let patient = |c: &mut Config| c.lock_wait = Duration::from_secs(30);
    let first = backing.spawn(None, patient).await;
    let second = backing.spawn(None, patient).await;
    first.create_product(1, 10).await;
    let ids: Vec<String> = (0..30).map(|i| format!("two-{i}")).collect();
    let statuses = stampede(&[&first, &second], 1, &ids).await;
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (10, 20), "statuses: {statuses:?}");
    assert_eq!(second.stock(1).await.0, 0);
    assert_eq!(
        backing
            .count("SELECT COUNT(*) FROM deductions WHERE status = 'APPLIED'")
            .await,
        10
    );
    // Every id was decided once: its replay, from either instance, answers the same.
    for (i, id) in ids.iter().enumerate() {
        let app = if i % 2 == 0 { &second } else { &first };
        let again = app.deduct(id, &[(1, 1)]).await;
        assert_eq!(again.status().as_u16(), statuses[i], "{id}");
        assert!(replayed(&again), "{id}");
    }
}

#[tokio::test]
async fn holds_on_mysql_try_confirm_and_cancel_once() {
    let backing = Backing::create().await;
    let app = backing
        .spawn(None, |c| c.hold_expiry_interval = Duration::from_secs(60))
        .await;
    app.create_product(1, 10).await;

    let tried = app.hold("h-1", &[(1, 3)], 600).await;
    assert_eq!(tried.status(), 201);
    let tried = tried.bytes().await.expect("body");
    assert_eq!(app.stock(1).await, (7, 3, 1));
    let again = app.hold("h-1", &[(1, 3)], 600).await;
    assert_eq!(again.status(), 201);
    assert!(replayed(&again));
    assert_eq!(again.bytes().await.expect("body"), tried);
    assert_problem(
        app.hold("h-1", &[(1, 4)], 600).await,
        422,
        "idempotency-key-reused",
    )
    .await;

    // The first confirm rides in the product's batch, the second is decided the general way.
    let (state, items) = app.ended("h-1", "confirm").await;
    assert_eq!(
        (state.as_str(), items),
        ("CONFIRMED", json!([{"product_id": 1, "quantity": 3}]))
    );
    assert_eq!(app.ended("h-1", "confirm").await.0, "CONFIRMED");
    assert_problem(app.end_hold("h-1", "cancel").await, 409, "hold-confirmed").await;
    assert_eq!(
        app.stock(1).await,
        (7, 0, 1),
        "sold: no longer held, not back"
    );

    assert_eq!(app.hold("h-2", &[(1, 2)], 600).await.status(), 201);
    assert_eq!(app.stock(1).await, (5, 2, 2));
    assert_eq!(app.ended("h-2", "cancel").await.0, "CANCELLED");
    assert_eq!(app.stock(1).await, (7, 0, 3), "the units are back, once");
    assert_eq!(app.ended("h-2", "cancel").await.0, "CANCELLED");
    assert_problem(app.end_hold("h-2", "confirm").await, 409, "hold-cancelled").await;
    assert_eq!(app.stock(1).await, (7, 0, 3));

    // A cancel before the try leaves a tombstone: the late try holds nothing.
    let (state, items) = app.ended("h-late", "cancel").await;
    assert_eq!((state.as_str(), items), ("CANCELLED", json!([])));
    assert_problem(
        app.hold("h-late", &[(1, 1)], 600).await,
        409,
        "hold-cancelled",
    )
    .await;
    assert_eq!(app.get("/holds/h-late").await.status(), 200);

    // A try that cannot hold is refused whole and holds nothing.
    assert_problem(
        app.hold("h-big", &[(1, 8)], 600).await,
        409,
        "insufficient-stock",
    )
    .await;
    assert_problem(app.end_hold("h-big", "confirm").await, 404, "not-found").await;
    assert_problem(app.end_hold("h-never", "confirm").await, 404, "not-found").await;
    assert_eq!(app.stock(1).await, (7, 0, 3));
    let states: Vec<(String, String)> =
        sqlx::query_as("SELECT hold_id, state FROM holds ORDER BY hold_id")
            .fetch_all(backing.pool())
            .await
            .expect("holds");
    let states: Vec<(&str, &str)> = states
        .iter()
        .map(|(id, state)| (id.as_str(), state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("h-1", "CONFIRMED"),
            ("h-2", "CANCELLED"),
            ("h-big", "REFUSED"),
            ("h-late", "CANCELLED")
        ]
    );
    assert_eq!(backing.count("SELECT COUNT(*) FROM held_units").await, 0);
}

#[tokio::test]
async fn a_short_hold_on_mysql_is_expired_by_the_sweep_and_its_units_come_back() {
    let backing = Backing::create().await;
    let app = backing
        .spawn(None, |c| {
            c.hold_expiry_interval = Duration::from_millis(200)
        })
        .await;
    app.create_product(1, 10).await;
    assert_eq!(app.hold("h-short", &[(1, 4)], 1).await.status(), 201);
    assert_eq!(app.hold("h-long", &[(1, 1)], 600).await.status(), 201);
    assert_eq!(app.stock(1).await.0, 5);
    // Only reads until the sweep has run: nothing here ends a hold.
    let hold = eventually(Duration::from_secs(20), || async {
        let hold: Value = app.get("/holds/h-short").await.json().await.ok()?;
        (hold["state"] == "EXPIRED").then_some(hold)
    })
    .await;
    assert_eq!(hold["items"], json!([{"product_id": 1, "quantity": 4}]));
    let (stock, held, _) = app.stock(1).await;
    assert_eq!(
        (stock, held),
        (9, 1),
        "the expired units are back, the live hold's not"
    );
    assert_problem(
        app.end_hold("h-short", "confirm").await,
        409,
        "hold-expired",
    )
    .await;
    assert_eq!(app.ended("h-short", "cancel").await.0, "EXPIRED");
    assert_eq!(
        app.get("/holds/h-long")
            .await
            .json::<Value>()
            .await
            .expect("a hold")["state"],
        "HELD"
    );
    assert_eq!(app.stock(1).await.0, 9);
}

#[tokio::test]
async fn order_events_on_mysql_reserve_and_release_stock_once() {
    let backing = Backing::create().await;
    let app = backing.spawn(None, |_| {}).await;
    app.create_product(1, 10).await;
    let probe = AmqpProbe::connect(&app.vhost_url).await;
    let (placed, short) = (Uuid::now_v7(), Uuid::now_v7());
    publish_order_created(&probe, placed, &[(1, 4)]).await;
    publish_order_created(&probe, short, &[(1, 20)]).await;
    let reservation = |order_id: Uuid| {
        let app = &app;
        async move {
            let response = app.get(&format!("/reservations/{order_id}")).await;
            response.status().is_success().then_some(())?;
            let body: Value = response.json().await.ok()?;
            Some(body["state"].as_str()?.to_owned())
        }
    };
    let within = Duration::from_secs(30);
    assert_eq!(eventually(within, || reservation(placed)).await, "APPLIED");
    assert_eq!(eventually(within, || reservation(short)).await, "REJECTED");
    assert_eq!(app.stock(1).await.0, 6);

    // The same event again is recorded once; the cancellation gives the units back, once.
    publish_order_created(&probe, placed, &[(1, 4)]).await;
    for _ in 0..2 {
        probe
            .publish_event(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CANCELLED,
                json!({"order_id": placed}),
            )
            .await;
    }
    let released = eventually(within, || async {
        (reservation(placed).await? == "RELEASED").then_some(())
    });
    released.await;
    eventually(within, || async {
        let stock = app.stock(1).await.0;
        (stock == 10).then_some(())
    })
    .await;
    // Both verdicts went to the outbox, in the transactions that decided them.
    assert!(backing.count("SELECT COUNT(*) FROM outbox").await >= 2);
    assert!(
        backing
            .count("SELECT COUNT(*) FROM processed_messages")
            .await
            >= 3,
        "the messages applied are recorded"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.stock(1).await.0, 10, "released once");
}
