//! The fleet every cluster scenario runs: several processes of each service (the real binaries,
//! configured only through the environment, as in a deployment), a steady load of orders from a
//! client that retries through an outage the way a well-behaved one does, and the check of
//! invariants 1–5 of docs/contract.md §4.3 once the dust has settled.
//!
//! A scenario brings the backing services (its cluster plus whatever it takes from the
//! machine), describes how each service reaches them in a [`ServiceEnv`], and then:
//!
//! ```text
//! let fleet = Fleet::start(orders_env, inventory_env, 2).await;
//! fleet.create_products(&initial).await;
//! let load = Load::start(&fleet, LoadPlan { .. });
//! // … the outage …
//! let report = load.finish().await;
//! check_invariants(&fleet, &report, &databases, &amqp_url, &initial, settle).await;
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::{AmqpProbe, KilledOnDrop, eventually};

/// Bearer token of the admin endpoints on every instance.
pub const ADMIN: &str = "clusters-admin-token";

/// Environment for every instance of one service: how it reaches its backing services.
///
/// The scenario fills it (`DATABASE_URL` or `DATABASE_URLS`, `REDIS_URL` or `REDIS_SENTINELS` +
/// `REDIS_SENTINEL_MASTER`, `AMQP_URL` or `AMQP_URLS`, …). The fleet adds `HTTP_ADDR`,
/// `ADMIN_TOKEN`, `REDIS_KEY_PREFIX` (one per service, shared by its instances),
/// `INVENTORY_URL` (order-service's reconciliation), and, unless the scenario set them,
/// `RUST_LOG=warn` and `DATABASE_MAX_CONNECTIONS=5` (the machine's PostgreSQL is shared).
#[derive(Debug, Clone, Default)]
pub struct ServiceEnv(pub Vec<(String, String)>);

impl ServiceEnv {
    /// Adds `name=value` (a later value for the same name wins).
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.0.push((name.to_owned(), value.into()));
        self
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }
}

/// One service process, killed when dropped.
struct Instance {
    base: String,
    _process: KilledOnDrop,
}

/// `instances` processes of order-service and of inventory-service, each on its own port,
/// all killed when the fleet drops. Their output goes to one log file each in a directory
/// [`Fleet::start`] prints, kept when the test fails.
pub struct Fleet {
    orders: Vec<Instance>,
    inventory: Vec<Instance>,
    log_dir: PathBuf,
    client: reqwest::Client,
}

impl Fleet {
    /// Starts every inventory instance, then every order instance (reconciling with the first
    /// inventory instance), and waits until each answers `/readyz` with 200.
    pub async fn start(orders: ServiceEnv, inventory: ServiceEnv, instances: usize) -> Fleet {
        let log_dir = std::env::temp_dir().join(format!("fleet-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&log_dir).expect("the fleet's log directory");
        let mut fleet = Fleet {
            orders: Vec::new(),
            inventory: Vec::new(),
            log_dir,
            client: client(),
        };
        let inventory = inventory.with("REDIS_KEY_PREFIX", testkit::redis_prefix());
        for n in 0..instances {
            let instance = fleet.spawn(
                env!("CARGO_BIN_EXE_inventory-service-process"),
                &format!("inventory-{n}"),
                &inventory,
            );
            fleet.inventory.push(instance);
        }
        let orders = orders
            .with("REDIS_KEY_PREFIX", testkit::redis_prefix())
            .with("INVENTORY_URL", fleet.inventory_bases()[0].clone());
        for n in 0..instances {
            let instance = fleet.spawn(
                env!("CARGO_BIN_EXE_order-service-process"),
                &format!("orders-{n}"),
                &orders,
            );
            fleet.orders.push(instance);
        }
        let bases: Vec<String> = fleet
            .inventory_bases()
            .into_iter()
            .chain(fleet.order_bases())
            .collect();
        for base in bases {
            eventually(Duration::from_secs(60), || async {
                let ready = fleet.client.get(format!("{base}/readyz")).send().await;
                let ready = ready.is_ok_and(|r| r.status() == StatusCode::OK);
                if !ready {
                    // Rarely: a port of the ephemeral range polled before its service listens
                    // can connect to itself and keep the service from binding it.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                ready.then_some(())
            })
            .await;
        }
        println!(
            "fleet: {instances} order-service and {instances} inventory-service processes ready; logs in {}",
            fleet.log_dir.display()
        );
        fleet
    }

    fn spawn(&self, binary: &str, name: &str, env: &ServiceEnv) -> Instance {
        let port = testkit::free_port();
        let log = std::fs::File::create(self.log_dir.join(format!("{name}.log")))
            .expect("an instance's log file");
        let mut command = std::process::Command::new(binary);
        command
            .env("RUST_LOG", "warn")
            .env("DATABASE_MAX_CONNECTIONS", "5")
            .envs(env.0.iter().map(|(n, v)| (n, v)))
            .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("ADMIN_TOKEN", ADMIN)
            .stdout(log.try_clone().expect("the log file again"))
            .stderr(log);
        assert!(!env.has("HTTP_ADDR"), "the fleet chooses the ports");
        let process = command.spawn().expect("the service process starts");
        Instance {
            base: format!("http://127.0.0.1:{port}"),
            _process: KilledOnDrop(process),
        }
    }

    /// Base URLs of the order-service instances.
    pub fn order_bases(&self) -> Vec<String> {
        self.orders.iter().map(|i| i.base.clone()).collect()
    }

    /// Base URLs of the inventory-service instances.
    pub fn inventory_bases(&self) -> Vec<String> {
        self.inventory.iter().map(|i| i.base.clone()).collect()
    }

    /// Creates each `(product_id, stock)` through the inventory API.
    pub async fn create_products(&self, products: &[(i64, i64)]) {
        let base = &self.inventory_bases()[0];
        for &(product_id, stock) in products {
            let response = self
                .client
                .post(format!("{base}/products"))
                .bearer_auth(ADMIN)
                .json(&json!({"product_id": product_id, "name": format!("product {product_id}"), "stock": stock}))
                .send()
                .await
                .expect("create a product");
            assert_eq!(
                response.status(),
                StatusCode::CREATED,
                "product {product_id}"
            );
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // The instances are killed as their fields drop; their logs matter only after a failure.
        if std::thread::panicking() {
            eprintln!("the fleet's logs are kept in {}", self.log_dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.log_dir);
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        // Longer than the services' own request timeout (10 s): a slow answer is theirs to give.
        .timeout(Duration::from_secs(15))
        .build()
        .expect("an HTTP client")
}

/// Steady load: `rate` orders per second for `duration`, each with a fresh token, spread
/// round-robin over the order-service instances, one or two items over `products`. A request
/// that fails (no answer, or a 5xx) is retried with the SAME token and body, on the next
/// instance, until it gets an answer or `give_up` passes: what a well-behaved client does
/// through an outage.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub rate: u32,
    pub duration: Duration,
    pub products: Vec<i64>,
    pub give_up: Duration,
}

/// The load running in the background; [`Load::finish`] waits for its last order.
pub struct Load {
    /// Every order's outcome, and how long it took until the last one was answered.
    driver: tokio::task::JoinHandle<(Vec<Outcome>, Duration)>,
}

/// An order the service accepted (2xx).
#[derive(Debug, Clone)]
pub struct Placed {
    pub token: String,
    pub order_id: String,
    /// The request body, as sent on every attempt.
    pub body: Value,
    /// The body of the first 2xx answer, byte for byte.
    pub response: String,
}

/// What the load saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Orders answered 2xx, in the order they were sent.
    pub accepted: Vec<Placed>,
    /// Final status of the orders that never got a 2xx (0: no answer at all before `give_up`).
    pub refused: BTreeMap<u16, usize>,
    /// Orders that needed more than one attempt (token or order).
    pub retried: usize,
    /// From the first order sent until the last one was answered.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Adds what `other`, a load run beside this one, saw.
    pub fn absorb(&mut self, other: LoadReport) {
        self.accepted.extend(other.accepted);
        for (status, n) in other.refused {
            *self.refused.entry(status).or_default() += n;
        }
        self.retried += other.retried;
        self.elapsed = self.elapsed.max(other.elapsed);
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} accepted, {} refused {:?}, {} retried, in {:.1} s",
            self.accepted.len(),
            self.refused.values().sum::<usize>(),
            self.refused,
            self.retried,
            self.elapsed.as_secs_f64()
        )
    }
}

enum Outcome {
    Accepted(Placed, bool),
    Refused(u16, bool),
}

impl Load {
    /// Starts sending; returns at once.
    pub fn start(fleet: &Fleet, plan: LoadPlan) -> Load {
        assert!(
            plan.rate > 0 && !plan.products.is_empty(),
            "a load needs a rate and products"
        );
        let bases: Arc<[String]> = fleet.order_bases().into();
        let client = client();
        let driver = tokio::spawn(async move {
            let started = Instant::now();
            let interval = Duration::from_secs(1) / plan.rate;
            let total = (plan.duration.as_secs_f64() * f64::from(plan.rate)).round() as usize;
            let next_instance = Arc::new(AtomicUsize::new(0));
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut orders = Vec::with_capacity(total);
            for n in 0..total {
                ticks.tick().await;
                let order = Order {
                    client: client.clone(),
                    bases: bases.clone(),
                    next_instance: next_instance.clone(),
                    body: order_body(n, &plan.products),
                    give_up: Instant::now() + plan.give_up,
                };
                orders.push(tokio::spawn(order.place()));
            }
            let mut outcomes = Vec::with_capacity(total);
            for order in orders {
                outcomes.push(order.await.expect("an order's task"));
            }
            (outcomes, started.elapsed())
        });
        Load { driver }
    }

    /// Waits until every order was answered or gave up.
    pub async fn finish(self) -> LoadReport {
        let (outcomes, elapsed) = self.driver.await.expect("the load's driver");
        let mut report = LoadReport {
            elapsed,
            ..LoadReport::default()
        };
        for outcome in outcomes {
            let retried = match outcome {
                Outcome::Accepted(placed, retried) => {
                    report.accepted.push(placed);
                    retried
                }
                Outcome::Refused(status, retried) => {
                    *report.refused.entry(status).or_default() += 1;
                    retried
                }
            };
            report.retried += usize::from(retried);
        }
        report
    }
}

/// Order `n`: one item, or two for every third order; quantity 1 or 2.
fn order_body(n: usize, products: &[i64]) -> Value {
    let item =
        |k: usize| json!({"product_id": products[k % products.len()], "quantity": 1 + k % 2});
    let items = if n.is_multiple_of(3) && products.len() > 1 {
        vec![item(n), item(n + 1)]
    } else {
        vec![item(n)]
    };
    json!({"user_id": 1 + n % 50, "items": items, "amount": "9.99"})
}

/// One order of the load and its client's patience.
struct Order {
    client: reqwest::Client,
    bases: Arc<[String]>,
    next_instance: Arc<AtomicUsize>,
    body: Value,
    give_up: Instant,
}

/// What one attempt got back: an answer to keep, or a failure worth another attempt.
enum Attempt {
    Answer(StatusCode, String),
    Failed(u16),
}

impl Order {
    async fn place(self) -> Outcome {
        let mut attempts = 0usize;
        let token = loop {
            attempts += 1;
            match self
                .attempt(|base| self.client.post(format!("{base}/idempotency-tokens")))
                .await
            {
                Attempt::Answer(status, body) if status.is_success() => {
                    let token: Value = serde_json::from_str(&body).expect("a token's JSON");
                    break token["token"].as_str().expect("a token").to_owned();
                }
                Attempt::Answer(status, _) => {
                    return Outcome::Refused(status.as_u16(), attempts > 1);
                }
                Attempt::Failed(status) if Instant::now() >= self.give_up => {
                    return Outcome::Refused(status, attempts > 1);
                }
                Attempt::Failed(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let mut order_attempts = 0usize;
        loop {
            order_attempts += 1;
            let retried = attempts > 1 || order_attempts > 1;
            let answer = self
                .attempt(|base| {
                    self.client
                        .post(format!("{base}/orders"))
                        .header("Idempotency-Key", &token)
                        .json(&self.body)
                })
                .await;
            match answer {
                Attempt::Answer(status, response) if status.is_success() => {
                    let order: Value = serde_json::from_str(&response).expect("an order's JSON");
                    let order_id = order["order_id"].as_str().expect("an order id").to_owned();
                    let placed = Placed {
                        token,
                        order_id,
                        body: self.body,
                        response,
                    };
                    return Outcome::Accepted(placed, retried);
                }
                Attempt::Answer(status, _) => return Outcome::Refused(status.as_u16(), retried),
                Attempt::Failed(status) if Instant::now() >= self.give_up => {
                    return Outcome::Refused(status, retried);
                }
                Attempt::Failed(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Sends the request `build` makes for the next instance in turn.
    async fn attempt(&self, build: impl Fn(&str) -> reqwest::RequestBuilder) -> Attempt {
        let n = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let base = &self.bases[n % self.bases.len()];
        match build(base).send().await {
            Err(_) => Attempt::Failed(0),
            Ok(response) if response.status().is_server_error() => {
                Attempt::Failed(response.status().as_u16())
            }
            Ok(response) => {
                let status = response.status();
                match response.text().await {
                    Ok(body) => Attempt::Answer(status, body),
                    Err(_) => Attempt::Failed(0),
                }
            }
        }
    }
}

/// Where the checker reads each service's database.
#[derive(Debug, Clone)]
pub struct Databases {
    pub orders: String,
    pub inventory: String,
}

impl Databases {
    /// The test databases a scenario made for the services.
    pub fn of(orders: &testkit::TestDatabase, inventory: &testkit::TestDatabase) -> Self {
        Self {
            orders: orders.url.clone(),
            inventory: inventory.url.clone(),
        }
    }
}

/// Invariants 1–5 of docs/contract.md §4.3 after a scenario, printed as a summary and asserted:
///
/// 1. per product: initial stock + restocks − final stock = Σ quantity of confirmed orders
///    + applied direct deductions;
/// 2. stock ≥ 0;
/// 3. every accepted order is terminal within `settle` (waited for, not assumed);
/// 4. one order per token (in the order database), and a replay of every accepted token
///    returns byte for byte its first body;
/// 5. no message applied twice (one reservation per order, and inventory applied exactly the
///    confirmed orders), no outbox row unsent in either service (waited for within `settle`),
///    every dead-letter queue empty (on `amqp_url`).
///
/// Assumes no order was cancelled (the load cancels none).
pub async fn check_invariants(
    fleet: &Fleet,
    report: &LoadReport,
    dbs: &Databases,
    amqp_url: &str,
    initial: &[(i64, i64)],
    settle: Duration,
) {
    let orders_db = PgPool::connect(&dbs.orders)
        .await
        .expect("the order database");
    let inventory_db = PgPool::connect(&dbs.inventory)
        .await
        .expect("the inventory database");
    let settled_at = Instant::now();

    // 3. Every accepted order leaves PENDING; the outboxes drain (part of 5).
    eventually(settle, || async {
        let pending = count(
            &orders_db,
            "SELECT count(*) FROM orders WHERE status = 'PENDING'",
        )
        .await;
        let unsent = count(
            &orders_db,
            "SELECT count(*) FROM outbox WHERE status <> 'sent'",
        )
        .await
            + count(
                &inventory_db,
                "SELECT count(*) FROM outbox WHERE status <> 'sent'",
            )
            .await;
        (pending == 0 && unsent == 0).then_some(())
    })
    .await;
    let settle_took = settled_at.elapsed();
    let statuses: HashMap<String, String> =
        sqlx::query_as::<_, (String, String)>("SELECT order_id::text, status FROM orders")
            .fetch_all(&orders_db)
            .await
            .expect("the orders")
            .into_iter()
            .collect();
    for placed in &report.accepted {
        let status = statuses.get(&placed.order_id).map(String::as_str);
        assert!(
            matches!(status, Some("CONFIRMED" | "REJECTED")),
            "accepted order {} is {status:?}",
            placed.order_id
        );
    }
    let confirmed = statuses.values().filter(|s| *s == "CONFIRMED").count();
    let rejected = statuses.values().filter(|s| *s == "REJECTED").count();

    // 1 and 2. The stock moved by exactly what was confirmed and deducted, and never below 0.
    let sold = per_product(
        &orders_db,
        "SELECT (item->>'product_id')::bigint, sum((item->>'quantity')::bigint)::bigint \
         FROM orders, jsonb_array_elements(items) AS item WHERE status = 'CONFIRMED' GROUP BY 1",
    )
    .await;
    let deducted = per_product(
        &inventory_db,
        "SELECT (item->>'product_id')::bigint, sum((item->>'quantity')::bigint)::bigint \
         FROM deductions, jsonb_array_elements(items) AS item WHERE status = 'APPLIED' GROUP BY 1",
    )
    .await;
    let restocked = per_product(
        &inventory_db,
        "SELECT product_id, sum(quantity)::bigint FROM restocks GROUP BY 1",
    )
    .await;
    let stock = per_product(&inventory_db, "SELECT product_id, stock FROM products").await;
    for &(product, initial_stock) in initial {
        let final_stock = stock.get(&product).copied().expect("the product exists");
        let restocks = restocked.get(&product).copied().unwrap_or(0);
        let taken =
            sold.get(&product).copied().unwrap_or(0) + deducted.get(&product).copied().unwrap_or(0);
        assert_eq!(
            initial_stock + restocks - final_stock,
            taken,
            "invariant 1 for product {product}: initial {initial_stock} + restocks {restocks} − \
             final {final_stock} ≠ confirmed + deducted {taken}"
        );
        assert!(
            final_stock >= 0,
            "invariant 2: product {product} has stock {final_stock}"
        );
    }

    // 4. One order per token, and each accepted token replays its first body.
    let (keys, distinct_orders, orders): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM idempotency_keys), \
                (SELECT count(DISTINCT order_id) FROM idempotency_keys), \
                (SELECT count(*) FROM orders)",
    )
    .fetch_one(&orders_db)
    .await
    .expect("tokens and orders");
    assert_eq!(
        keys, distinct_orders,
        "invariant 4: a token holds more than one order"
    );
    assert_eq!(
        keys, orders,
        "invariant 4: every order came from exactly one token"
    );
    let replays = replay(fleet, &report.accepted).await;

    // 5. Inventory saw each order once and applied exactly the confirmed ones.
    let reservations = count(&inventory_db, "SELECT count(*) FROM reservations").await;
    assert_eq!(
        reservations, orders,
        "invariant 5: one reservation per order"
    );
    let applied: BTreeSet<String> =
        sqlx::query_scalar("SELECT order_id::text FROM reservations WHERE state = 'APPLIED'")
            .fetch_all(&inventory_db)
            .await
            .expect("applied reservations")
            .into_iter()
            .collect();
    let confirmed_ids: BTreeSet<String> = statuses
        .iter()
        .filter(|(_, s)| *s == "CONFIRMED")
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(
        applied, confirmed_ids,
        "invariant 5: inventory applied exactly the confirmed orders"
    );
    let probe = AmqpProbe::connect(amqp_url).await;
    let mut dead_lettered = 0;
    for queue in [
        shared::keys::INVENTORY_ORDER_EVENTS_QUEUE,
        shared::keys::ORDER_INVENTORY_EVENTS_QUEUE,
    ] {
        dead_lettered += probe.ready(&shared::keys::dead_letter_queue(queue)).await;
    }
    assert_eq!(
        dead_lettered, 0,
        "invariant 5: the dead-letter queues are empty"
    );

    println!(
        "invariants 1–5 hold: {orders} orders ({confirmed} confirmed, {rejected} rejected), all \
         terminal {:.1} s after the load ended; {replays} replays byte for byte; one reservation \
         per order; both outboxes empty; dead-letter queues empty",
        settle_took.as_secs_f64()
    );
    for &(product, initial_stock) in initial {
        println!(
            "  product {product}: {initial_stock} → {} (sold {}, deducted {}, restocked {})",
            stock[&product],
            sold.get(&product).copied().unwrap_or(0),
            deducted.get(&product).copied().unwrap_or(0),
            restocked.get(&product).copied().unwrap_or(0)
        );
    }
}

/// Replays every accepted order on the instances in turn; returns how many were replayed.
async fn replay(fleet: &Fleet, accepted: &[Placed]) -> usize {
    use futures_util::StreamExt;
    let bases = fleet.order_bases();
    let client = &fleet.client;
    futures_util::stream::iter(accepted.iter().enumerate())
        .map(|(n, placed)| {
            let base = &bases[n % bases.len()];
            async move {
                let response = client
                    .post(format!("{base}/orders"))
                    .header("Idempotency-Key", &placed.token)
                    .json(&placed.body)
                    .send()
                    .await
                    .expect("a replay");
                assert!(
                    response.status().is_success(),
                    "replay of {}: {}",
                    placed.token,
                    response.status()
                );
                let body = response.text().await.expect("the replay's body");
                assert_eq!(
                    body, placed.response,
                    "invariant 4: the replay of {} differs",
                    placed.token
                );
            }
        })
        .buffer_unordered(16)
        .count()
        .await
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

async fn per_product(pool: &PgPool, sql: &'static str) -> HashMap<i64, i64> {
    sqlx::query_as::<_, (i64, i64)>(sql)
        .fetch_all(pool)
        .await
        .expect(sql)
        .into_iter()
        .collect()
}
