//! `Stack`: order-service and inventory-service on random ports with their own databases (on
//! the backend the test names) and Redis prefixes, sharing one RabbitMQ vhost, like a
//! deployment in miniature.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{AmqpProbe, Backend, BackendDatabase, TestVhost};
use tokio_util::sync::CancellationToken;

pub const ADMIN: &str = "e2e-admin-token";
pub const SETTLE: Duration = Duration::from_secs(20);

/// One running service; dropped or stopped, it shuts down gracefully.
pub struct Running {
    pub base: String,
    shutdown: CancellationToken,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops the service the way SIGTERM does and waits until it has drained.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub struct Stack {
    pub orders: Running,
    pub inventory: Option<Running>,
    pub vhost: TestVhost,
    pub order_db: BackendDatabase,
    pub inventory_db: BackendDatabase,
    pub client: reqwest::Client,
    /// Sent as `Authorization: Bearer` to order-service (identity on).
    pub bearer: Option<String>,
    /// Inventory keeps reservations to the admin token (set before it starts).
    pub reservations_require_admin: bool,
    inventory_prefix: String,
    inventory_addr: std::net::SocketAddr,
    /// Held for the whole test, so no other test can take inventory's port while it is
    /// stopped; each start serves a clone of it.
    inventory_listener: std::net::TcpListener,
}

impl Stack {
    /// Both services, on databases of `backend`.
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, true, |_| {}).await
    }

    /// `with_inventory: false` starts only order-service (inventory "down" until
    /// [`Stack::start_inventory`]).
    pub async fn spawn_with(
        backend: Backend,
        with_inventory: bool,
        configure_orders: impl FnOnce(&mut order_service::config::Config),
    ) -> Self {
        testkit::init_logs();
        let vhost = TestVhost::create();
        let order_db =
            BackendDatabase::create(backend, "e2e_orders", order_service::migrators()).await;
        let inventory_db =
            BackendDatabase::create(backend, "e2e_inventory", inventory_service::migrators()).await;
        // Bind inventory's port now, so order-service knows where to reconcile.
        let inventory_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        inventory_listener
            .set_nonblocking(true)
            .expect("non-blocking");
        let inventory_addr = inventory_listener.local_addr().expect("addr");
        let mut order_config = order_service::config::Config {
            http_addr: "127.0.0.1:0".parse().expect("address"),
            database_urls: vec![order_db.url().to_owned()],
            database_max_connections: 10,
            redis_url: testkit::redis_url(),
            redis_key_prefix: testkit::redis_prefix(),
            amqp_urls: vec![vhost.url.clone()],
            admin_token: Some(ADMIN.into()),
            inventory_url: format!("http://{inventory_addr}"),
            request_timeout: Duration::from_secs(30),
            // Reconciliation idle unless a test turns it on.
            reconcile_after: Duration::from_secs(3600),
            reconcile_every: Duration::from_secs(3600),
            ..Default::default()
        };
        configure_orders(&mut order_config);
        let orders = start_orders(order_config).await;
        let mut stack = Self {
            orders,
            inventory: None,
            vhost,
            order_db,
            inventory_db,
            client: reqwest::Client::new(),
            bearer: None,
            reservations_require_admin: false,
            inventory_prefix: testkit::redis_prefix(),
            inventory_addr,
            inventory_listener,
        };
        if with_inventory {
            stack.start_inventory().await;
        }
        stack
    }

    pub async fn start_inventory(&mut self) {
        let config = inventory_service::Config {
            http_addr: self.inventory_addr,
            database_urls: vec![self.inventory_db.url().to_owned()],
            database_max_connections: 10,
            redis_url: testkit::redis_url(),
            redis_key_prefix: self.inventory_prefix.clone(),
            amqp_urls: vec![self.vhost.url.clone()],
            admin_token: Some(ADMIN.into()),
            lock_wait: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            reservations_require_admin: self.reservations_require_admin,
            ..Default::default()
        };
        let state = inventory_service::build_state(config.clone())
            .await
            .expect("inventory state");
        let listener = self
            .inventory_listener
            .try_clone()
            .and_then(tokio::net::TcpListener::from_std)
            .expect("inventory's listener");
        let shutdown = CancellationToken::new();
        let done = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                let _ = inventory_service::serve(state, listener, shutdown).await;
            }
        });
        self.inventory = Some(Running {
            base: format!("http://{}", self.inventory_addr),
            shutdown,
            done: Some(done),
        });
    }

    pub async fn stop_inventory(&mut self) {
        if let Some(inventory) = self.inventory.take() {
            inventory.stop().await;
        }
    }

    pub fn order_url(&self, path: &str) -> String {
        format!("{}{path}", self.orders.base)
    }

    /// A request to order-service, as the stack's user when it has one.
    pub fn to_orders(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, self.order_url(path));
        match &self.bearer {
            Some(bearer) => request.bearer_auth(bearer),
            None => request,
        }
    }

    pub fn inventory_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.inventory_addr)
    }

    pub async fn probe(&self) -> AmqpProbe {
        AmqpProbe::connect(&self.vhost.url).await
    }

    /// Product 1001 with stock 10 and two confirmed orders of it, of 2 and 3 units (5 left):
    /// one to keep and one to cancel, for the flows that give stock back.
    pub async fn two_confirmed_orders(&self) -> (Value, Value) {
        self.create_product(1001, 10).await;
        let kept = self
            .place(json!([{"product_id": 1001, "quantity": 2}]))
            .await;
        let cancelled = self
            .place(json!([{"product_id": 1001, "quantity": 3}]))
            .await;
        for order in [&kept, &cancelled] {
            assert_eq!(self.settled(&id(order)).await["status"], "CONFIRMED");
        }
        assert_eq!(self.stock(1001).await, 5);
        (kept, cancelled)
    }

    /// Cancels `order_id` while inventory is down and takes its `order.cancelled` off the
    /// queue, as a broker losing it would, then starts inventory again: only reconciliation
    /// can give the stock back now. (A creation reconciliation published again while the order
    /// was young may be queued too; losing it changes nothing, inventory applied it already.)
    pub async fn cancel_and_lose_the_cancellation(&mut self, order_id: &str) {
        self.stop_inventory().await;
        assert_eq!(self.cancel(order_id).await["status"], "CANCELLED");
        let probe = self.probe().await;
        eventually(Duration::from_secs(10), || async {
            let taken = probe
                .get(shared::keys::INVENTORY_ORDER_EVENTS_QUEUE)
                .await?;
            (taken.routing_key == shared::keys::ORDER_CANCELLED).then_some(())
        })
        .await;
        self.start_inventory().await;
    }

    /// Waits until order-service has recorded that inventory released `order_id`'s stock,
    /// and checks that inventory's reservation says so too.
    pub async fn released(&self, order_id: &str) {
        let sql = format!(
            "SELECT count(*) FROM orders WHERE order_id = {} AND released_at IS NOT NULL",
            testkit::uuid_literal(self.order_db.backend(), order_id)
        );
        eventually(Duration::from_secs(30), || async {
            (self.order_db.count(&sql).await == 1).then_some(())
        })
        .await;
        let reservation = self.reservation(order_id).await.expect("reservation");
        assert_eq!(reservation["state"], "RELEASED");
    }

    pub async fn create_product(&self, product_id: i64, stock: i64) {
        create_product(&self.client, &self.inventory_url(""), product_id, stock).await;
    }

    pub async fn stock(&self, product_id: i64) -> i64 {
        stock_of(&self.client, &self.inventory_url(""), product_id).await
    }

    /// Takes a token and places an order; returns the order JSON.
    pub async fn place(&self, items: Value) -> Value {
        self.place_with_trace(items, None).await
    }

    /// [`Stack::place`], optionally continuing the client's W3C `traceparent`.
    pub async fn place_with_trace(&self, items: Value, traceparent: Option<&str>) -> Value {
        let token = testkit::fetch_json(
            self.to_orders(reqwest::Method::POST, "/idempotency-tokens"),
            "token",
        )
        .await;
        let mut request = self
            .to_orders(reqwest::Method::POST, "/orders")
            .header("Idempotency-Key", token["token"].as_str().expect("token"))
            .json(&json!({"user_id": 1, "items": items, "amount": "9.99"}));
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        let response = request.send().await.expect("order");
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        response.json().await.expect("json")
    }

    pub async fn order(&self, order_id: &str) -> Value {
        let request = self.to_orders(reqwest::Method::GET, &format!("/orders/{order_id}"));
        testkit::fetch_json(request, "get order").await
    }

    /// Waits until the order leaves `PENDING`; returns it.
    pub async fn settled(&self, order_id: &str) -> Value {
        eventually(SETTLE, || async {
            let order = self.order(order_id).await;
            (order["status"] != "PENDING").then_some(order)
        })
        .await
    }

    pub async fn cancel(&self, order_id: &str) -> Value {
        let response = self
            .to_orders(reqwest::Method::POST, &format!("/orders/{order_id}/cancel"))
            .send()
            .await
            .expect("cancel");
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.expect("json")
    }

    pub async fn reservation(&self, order_id: &str) -> Option<Value> {
        let mut request = self
            .client
            .get(self.inventory_url(&format!("/reservations/{order_id}")));
        if self.reservations_require_admin {
            request = request.bearer_auth(ADMIN);
        }
        reservation_of(request).await
    }

    /// A count from inventory's database (`sql` read alike by both backends).
    pub async fn inventory_count(&self, sql: &str) -> i64 {
        self.inventory_db.count(sql).await
    }
}

async fn start_orders(config: order_service::config::Config) -> Running {
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .expect("order port");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = order_service::build_state(config)
        .await
        .expect("order state");
    let shutdown = CancellationToken::new();
    let done = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            let _ = order_service::serve(state, listener, shutdown).await;
        }
    });
    Running {
        base,
        shutdown,
        done: Some(done),
    }
}

pub use testkit::eventually;

pub fn id(order: &Value) -> String {
    order["order_id"].as_str().expect("order id").to_owned()
}

/// Creates product `product_id` with `stock` units on the inventory-service at `inventory`.
pub async fn create_product(
    client: &reqwest::Client,
    inventory: &str,
    product_id: i64,
    stock: i64,
) {
    let response = client
        .post(format!("{inventory}/products"))
        .bearer_auth(ADMIN)
        .json(&json!({"product_id": product_id, "name": format!("product {product_id}"), "stock": stock}))
        .send()
        .await
        .expect("create product");
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// The stock of `product_id` on the inventory-service at `inventory`.
pub async fn stock_of(client: &reqwest::Client, inventory: &str, product_id: i64) -> i64 {
    let request = client.get(format!("{inventory}/products/{product_id}"));
    let product = testkit::fetch_json(request, "get product").await;
    product["stock"].as_i64().expect("stock")
}

/// The reservation `request` (a `GET /reservations/{order_id}`) reads; `None` unless it is 200.
pub async fn reservation_of(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = request.send().await.expect("reservation");
    match response.status() {
        StatusCode::OK => Some(response.json().await.expect("json")),
        _ => None,
    }
}
