//! The payment window (docs/contract.md §3.1.1): reservations that wait for a confirm, the
//! clock that closes the window, the expiry that gives the stock back, and their races.
//! Inventory's reservations are handed to the service's own consumer handler, as a delivery
//! from the broker would be.

mod confirm;
mod expiry;
mod race;

use std::time::Duration;

use order_service::config::Config;
use order_service::orders::payment::PaymentWindow;
use order_service::orders::settle::consumer::InventoryEvents;
use platform::messaging::consumer::{Handled, Message};
use platform::messaging::outbox::OutboxSignal;
use platform::telemetry::TraceContext;
use reqwest::Response;
use serde_json::Value;
use shared::events::{Envelope, InventoryEvent, StockReserved};
use shared::ids::OrderId;
use testkit::Backend;

use crate::helpers::{TestApp, eventually, order_body};

/// A service on `backend` whose reservations wait `secs` for their payment; its expiry loop
/// runs every `expiry_every`.
async fn app_with_window(backend: Backend, secs: u64, expiry_every: Duration) -> TestApp {
    TestApp::spawn_on(backend, |c| configure(c, secs, expiry_every)).await
}

fn configure(config: &mut Config, secs: u64, expiry_every: Duration) {
    config.payment_window = PaymentWindow::from_secs(secs);
    config.payment_expiry_every = expiry_every;
}

/// Long enough that the expiry never runs during a test, after its first, empty round.
const NO_EXPIRY: Duration = Duration::from_secs(3600);

/// An order placed on `app`, as its JSON.
async fn placed(app: &TestApp) -> String {
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    order["order_id"].as_str().expect("id").to_owned()
}

/// Hands an `inventory.reserved` of `order_id` to a consumer handler on `app`'s database,
/// settling with `window` as a service with that setting would.
pub(crate) async fn reserve(app: &TestApp, order_id: &str, window: PaymentWindow) {
    let handler = InventoryEvents::new(app.database.database(), OutboxSignal::default(), window);
    let reserved = Envelope::new(InventoryEvent::Reserved(StockReserved {
        order_id: OrderId(order_id.parse().expect("uuid")),
        items: Vec::new(),
    }));
    let delivery = Message {
        routing_key: "inventory.reserved".into(),
        body: serde_json::to_vec(&reserved).expect("json"),
        trace: TraceContext::new_root(),
        previous_deliveries: 0,
    };
    let handled = platform::messaging::consumer::handle(&handler, &[delivery])
        .await
        .remove(0)
        .expect("handled");
    assert_eq!(handled, Handled::Applied);
}

async fn order(app: &TestApp, order_id: &str) -> Value {
    app.get(&format!("/orders/{order_id}"))
        .await
        .json()
        .await
        .expect("json")
}

async fn confirm_at(client: &reqwest::Client, base: &str, order_id: &str) -> Response {
    client
        .post(format!("{base}/orders/{order_id}/confirm"))
        .send()
        .await
        .expect("confirm")
}

async fn confirm(app: &TestApp, order_id: &str) -> Response {
    confirm_at(&app.client, &app.base, order_id).await
}

/// `order.cancelled` rows written for the order (the releases asked of inventory).
async fn releases(app: &TestApp, order_id: &str) -> i64 {
    let releases = "SELECT count(*) FROM outbox WHERE routing_key = 'order.cancelled'";
    app.database
        .scalar(
            &format!("{releases} AND payload->'payload'->>'order_id' = '{order_id}'"),
            &format!("{releases} AND JSON_VALUE(payload, '$.payload.order_id') = '{order_id}'"),
        )
        .await
}

/// Waits until the database's clock has reached the order's `payment_due_at`.
async fn wait_until_due(app: &TestApp, order_id: &str) {
    let due = format!(
        "SELECT count(*) FROM orders WHERE order_id = {} AND payment_due_at <= {}",
        testkit::uuid_literal(app.database.backend(), order_id),
        match app.database.backend() {
            Backend::Postgres => "now()",
            Backend::MySql => "CURRENT_TIMESTAMP(6)",
        }
    );
    eventually(Duration::from_secs(30), || async {
        (app.database.count(&due).await == 1).then_some(())
    })
    .await;
}
