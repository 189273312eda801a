//! `TestApp::spawn`: the real service on `127.0.0.1:0` with its own database (PostgreSQL, or
//! either backend with `spawn_on`), Redis key prefix and AMQP vhost, stopped when the value is
//! dropped; plus small request helpers.

use std::time::Duration;

use inventory_service::Config;
use inventory_service::deductions::Deductions;
use inventory_service::stock::lock::{LockOptions, Locker, RedisLock};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use shared::keys::{self, RedisKeys};
use sqlx::PgPool;
use testkit::{AmqpProbe, Backend, BackendDatabase, TestVhost, redis_prefix, redis_url};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// A Redis lock on `conn` (10 s TTL, 5 s wait, renewed) with the health check the services
/// run, every 200 ms, until the guard is dropped.
pub fn watched_locker(
    conn: platform::storage::redis::RedisConnection,
) -> (
    RedisLock,
    platform::storage::redis::health::RedisHealth,
    tokio_util::sync::DropGuard,
) {
    testkit::init_logs();
    let health = platform::storage::redis::health::RedisHealth::default();
    let stop = CancellationToken::new();
    tokio::spawn(
        health
            .clone()
            .watch(conn.clone(), Duration::from_millis(200), stop.clone()),
    );
    let locker = RedisLock::new(
        conn,
        RedisKeys::new(redis_prefix()),
        LockOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::from_secs(5),
            renew: true,
        },
        health.clone(),
    );
    (locker, health, stop.drop_guard())
}

/// A running service and the clients to talk to it.
#[derive(Debug)]
pub struct TestApp {
    /// `http://127.0.0.1:<port>`.
    pub address: String,
    /// Sends the admin token with every request.
    pub admin: reqwest::Client,
    /// Sends no credentials.
    pub anonymous: reqwest::Client,
    /// The service's own database, for checks behind the API.
    pub database: BackendDatabase,
    pub config: Config,
    /// The service's deduction batches, to count them.
    pub deductions: Deductions,
    shutdown: CancellationToken,
    _vhost: TestVhost,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// Spawns on PostgreSQL with the test defaults changed by `customize`.
    pub async fn spawn_with(customize: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_on(Backend::Postgres, customize).await
    }

    /// Two instances on one database of `backend`, each with the test defaults changed by
    /// `customize` (a Redis key prefix each, unless `customize` sets one).
    pub async fn two_on_one_database(
        backend: Backend,
        customize: impl Fn(&mut Config) + Clone,
    ) -> (Self, Self) {
        let first = Self::spawn_on(backend, customize.clone()).await;
        let url = first.config.database_urls[0].clone();
        let second = Self::spawn_on(backend, move |c| {
            customize(c);
            c.database_urls = vec![url];
        })
        .await;
        (first, second)
    }

    /// Spawns on a database of `backend` with the test defaults changed by `customize`.
    pub async fn spawn_on(backend: Backend, customize: impl FnOnce(&mut Config)) -> Self {
        testkit::init_logs();
        let database =
            BackendDatabase::create(backend, "inventory", inventory_service::migrators()).await;
        let vhost = TestVhost::create();
        let mut config = Config {
            http_addr: "127.0.0.1:0".parse().expect("an address"),
            database_urls: vec![database.url().to_owned()],
            // Two tests run at once, next to another service's tests: stay well under
            // PostgreSQL's connection limit.
            database_max_connections: 10,
            redis_url: redis_url(),
            redis_key_prefix: redis_prefix(),
            amqp_urls: vec![vhost.url.clone()],
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            ..Config::default()
        };
        customize(&mut config);
        let state = inventory_service::build_state(config.clone())
            .await
            .expect("the service state builds");
        let deductions = state.deductions.clone();
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
        Self {
            address,
            admin: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("a client"),
            anonymous: reqwest::Client::new(),
            database,
            config,
            deductions,
            shutdown,
            _vhost: vhost,
        }
    }

    /// The service's PostgreSQL pool, for the tests that read or hold its rows with
    /// PostgreSQL's own statements (they spawn on PostgreSQL).
    pub fn db(&self) -> &PgPool {
        match &self.database {
            BackendDatabase::Postgres(db) => &db.pool,
            BackendDatabase::MySql(_) => panic!("a PostgreSQL-only check on a MySQL app"),
        }
    }

    /// Waits until exactly `waiting` requests are queued for the deductions' batches.
    pub async fn waiting_reaches(&self, waiting: usize) {
        let deductions = self.deductions.clone();
        eventually(Duration::from_secs(30), || {
            let stats = deductions.stats();
            async move { (stats.waiting == waiting).then_some(()) }
        })
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// `GET path` without credentials.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.anonymous
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// The text of the service's `/metrics`.
    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.text().await.expect("a body")
    }

    /// The state of `order_id`'s reservation, if inventory has one (`GET /reservations/{id}`).
    pub async fn reservation_state(&self, order_id: Uuid) -> Option<String> {
        let response = self
            .admin
            .get(self.url(&format!("/reservations/{order_id}")))
            .send()
            .await
            .expect("GET /reservations/{id}");
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return None;
        }
        let reservation: Value = response.json().await.expect("a reservation");
        Some(reservation["state"].as_str().expect("its state").to_owned())
    }

    /// Waits (30 s at most) until `/readyz` answers 503, and returns its problem's detail,
    /// which names what is down.
    pub async fn unready_detail(&self) -> String {
        let readyz = self.url("/readyz");
        eventually(Duration::from_secs(30), || async {
            let answer = self.anonymous.get(&readyz).send().await.ok()?;
            if answer.status() != 503 {
                return None;
            }
            let problem: Value = answer.json().await.ok()?;
            problem["detail"].as_str().map(str::to_owned)
        })
        .await
    }

    /// `product`'s lock, held (and renewed) by another process until the guard is released.
    pub async fn lock_held_elsewhere(&self, product: i64) -> inventory_service::stock::lock::Locks {
        let other_process = self.locker(LockOptions {
            ttl: Duration::from_secs(5),
            wait: Duration::from_secs(5),
            renew: true,
        });
        other_process
            .acquire(shared::ids::ProductId(product))
            .await
            .expect("the lock")
    }

    /// A locker on the same Redis and key prefix as the service.
    pub fn locker(&self, options: LockOptions) -> Locker {
        let redis =
            platform::storage::redis::connect(&self.config.redis_url).expect("a Redis manager");
        Locker::new(RedisLock::new(
            redis,
            RedisKeys::new(self.config.redis_key_prefix.clone()),
            options,
            platform::storage::redis::health::RedisHealth::default(),
        ))
    }

    pub async fn create_product(&self, product_id: i64, stock: i64) -> Value {
        let response = self
            .admin
            .post(self.url("/products"))
            .json(&json!({"product_id": product_id, "name": format!("Product {product_id}"), "stock": stock}))
            .send()
            .await
            .expect("POST /products");
        assert_eq!(response.status(), 201, "creating product {product_id}");
        response.json().await.expect("a product")
    }

    pub async fn product(&self, product_id: i64) -> Value {
        let response = self.get(&format!("/products/{product_id}")).await;
        assert_eq!(response.status(), 200, "reading product {product_id}");
        response.json().await.expect("a product")
    }

    pub async fn stock(&self, product_id: i64) -> i64 {
        self.product(product_id).await["stock"]
            .as_i64()
            .expect("stock is a number")
    }

    /// `POST /deductions` with `items` as `[(product_id, quantity)]`.
    pub async fn deduct(&self, deduction_id: &str, items: &[(i64, i64)]) -> reqwest::Response {
        self.admin
            .post(self.url("/deductions"))
            .json(&deduction_body(deduction_id, items))
            .send()
            .await
            .expect("POST /deductions")
    }

    /// [`TestApp::deduct`] from a task of its own, so that many can be in flight at once; the
    /// handle resolves to the answer.
    pub fn deduct_in_task(&self, deduction_id: &str, items: &[(i64, i64)]) -> JoinHandle<Answer> {
        let request = self
            .admin
            .post(self.url("/deductions"))
            .json(&deduction_body(deduction_id, items));
        tokio::spawn(async move {
            let response = request.send().await.expect("POST /deductions");
            Answer {
                status: response.status().as_u16(),
                replayed: response.headers().contains_key("idempotent-replayed"),
                body: response.bytes().await.expect("a body").to_vec(),
            }
        })
    }

    pub async fn restock(
        &self,
        product_id: i64,
        quantity: i64,
        key: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .admin
            .post(self.url(&format!("/products/{product_id}/restock")))
            .json(&json!({"quantity": quantity}));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("POST /products/{id}/restock")
    }

    pub async fn deduction_rows(&self) -> i64 {
        self.database.count("SELECT count(*) FROM deductions").await
    }
}

/// The body of `POST /deductions` with `items` as `[(product_id, quantity)]`.
pub fn deduction_body(deduction_id: &str, items: &[(i64, i64)]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"product_id": p, "quantity": q}))
        .collect();
    json!({"deduction_id": deduction_id, "items": items})
}

/// One answer to `POST /deductions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Whether it carried `Idempotent-Replayed`.
    pub replayed: bool,
    pub body: Vec<u8>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub use testkit::{assert_problem, eventually};

/// Generous waits: these tests check correctness, not how fast 200 requests queue up on a
/// busy two-core machine.
pub fn patient(config: &mut inventory_service::Config) {
    config.lock_wait = Duration::from_secs(60);
    config.request_timeout = Duration::from_secs(120);
}

/// Sends `requests` one-unit deductions of `product` at once; returns the status codes.
pub async fn stampede(app: &TestApp, product: i64, requests: usize) -> Vec<u16> {
    let tasks: Vec<_> = (0..requests)
        .map(|i| app.deduct_in_task(&format!("stampede-{i}"), &[(product, 1)]))
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("the request task finishes").status);
    }
    statuses
}

/// 50 of 200 one-unit deductions on a stock of 50 applied, the rest refused, none oversold.
pub async fn assert_exactly_fifty_applied(app: &TestApp, product: i64, statuses: &[u16]) {
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (50, 150), "statuses: {statuses:?}");
    assert_eq!(app.stock(product).await, 0);
    let recorded = app
        .database
        .count("SELECT count(*) FROM deductions WHERE status = 'APPLIED'")
        .await;
    assert_eq!(recorded, 50);
}

/// A migrated database of its own with `(product_id, stock)` products, for tests that drive
/// the service's code without the service.
pub async fn database_with_products(
    backend: Backend,
    prefix: &str,
    products: &[(i64, i64)],
) -> BackendDatabase {
    let db = BackendDatabase::create(backend, prefix, inventory_service::migrators()).await;
    for (product, stock) in products {
        let insert = format!(
            "INSERT INTO products (product_id, name, stock) VALUES ({product}, 'widget', {stock})"
        );
        db.execute(&insert, &insert).await;
    }
    db
}

/// Asserts that `response` says it is a replay (`Idempotent-Replayed: true`).
pub fn assert_replayed(response: &reqwest::Response) {
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
}

/// Asserts that `again` is a 200 replay of the first answer's body `first`, byte for byte.
pub async fn assert_replays(again: reqwest::Response, first: &[u8]) {
    assert_eq!(again.status(), 200);
    assert_replayed(&again);
    assert_eq!(again.bytes().await.expect("body"), first);
}

/// Publishes an `order.created` of `order_id` for `items` as `[(product_id, quantity)]` (user
/// 1, amount 1.00), as order-service would.
pub async fn publish_order_created(probe: &AmqpProbe, order_id: Uuid, items: &[(i64, i64)]) {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"product_id": p, "quantity": q}))
        .collect();
    probe
        .publish_event(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            json!({"order_id": order_id, "user_id": 1, "items": items, "amount": "1.00"}),
        )
        .await;
}

/// Orders' events on `product` (created here with a stock of 10): one order of 4 reserves and
/// one of 20 is refused; the first's creation delivered again is recorded once, and its
/// cancellation, delivered twice, gives the 4 units back once.
pub async fn reserve_refuse_release(app: &TestApp, product: i64) {
    app.create_product(product, 10).await;
    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    let (placed, short) = (Uuid::now_v7(), Uuid::now_v7());
    publish_order_created(&probe, placed, &[(product, 4)]).await;
    publish_order_created(&probe, short, &[(product, 20)]).await;
    let state_becomes = |order_id: Uuid, wanted: &'static str| {
        eventually(Duration::from_secs(30), move || async move {
            (app.reservation_state(order_id).await? == wanted).then_some(())
        })
    };
    state_becomes(placed, "APPLIED").await;
    state_becomes(short, "REJECTED").await;
    assert_eq!(app.stock(product).await, 6);

    publish_order_created(&probe, placed, &[(product, 4)]).await;
    for _ in 0..2 {
        probe
            .publish_event(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CANCELLED,
                json!({"order_id": placed}),
            )
            .await;
    }
    state_becomes(placed, "RELEASED").await;
    eventually(Duration::from_secs(30), || async {
        (app.stock(product).await == 10).then_some(())
    })
    .await;
}

/// Makes `db` refuse every insert of `order_id`'s reservation (a trigger that raises): a
/// failure that repeats on every try.
pub async fn refuse_reservations_of(db: &BackendDatabase, order_id: Uuid) {
    // Text protocol (`raw_sql`): MySQL takes no CREATE TRIGGER as a prepared statement.
    let created = match db {
        BackendDatabase::Postgres(db) => sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE FUNCTION refuse_order() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.order_id = '{order_id}' THEN RAISE EXCEPTION 'refused'; END IF; \
                 RETURN NEW; END $$; \
                 CREATE TRIGGER refuse_order BEFORE INSERT ON reservations \
                 FOR EACH ROW EXECUTE FUNCTION refuse_order();"
        )))
        .execute(&db.pool)
        .await
        .map(drop),
        BackendDatabase::MySql(db) => sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TRIGGER refuse_order BEFORE INSERT ON reservations FOR EACH ROW \
                 BEGIN IF NEW.order_id = UNHEX(REPLACE('{order_id}', '-', '')) THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF; END"
        )))
        .execute(&db.pool)
        .await
        .map(drop),
    };
    created.expect("a trigger");
}
