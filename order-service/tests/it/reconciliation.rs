//! Reconciliation of orders left `PENDING`, and of `CANCELLED` orders whose stock may still be
//! held: settled from inventory's reservation record, or their event sent again. Inventory is
//! played by a small HTTP server here; the end-to-end suite runs the real one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use order_service::orders::payment::PaymentWindow;
use order_service::orders::reconcile::{ReconcileSettings, reconcile_once};
use order_service::orders::settle::consumer::InventoryEvents;
use platform::messaging::consumer::{Handled, Message};
use platform::messaging::outbox::OutboxSignal;
use platform::telemetry::TraceContext;
use serde_json::{Value, json};
use shared::events::{Envelope, InventoryEvent, StockReleased};
use shared::ids::OrderId;
use testkit::Backend;

use crate::helpers::{TestApp, order_body};

testkit::on_each_backend!(
    stale_pending_orders_are_settled_or_published_again,
    an_unseen_order_has_one_copy_of_its_creation_waiting_however_long_the_broker_is_away,
    what_was_learned_before_an_unreadable_answer_is_written,
    an_unreachable_inventory_changes_nothing,
    a_cancellation_that_went_dead_is_sent_again_until_inventory_has_released_the_stock,
    a_cancelled_order_is_settled_by_what_inventory_holds_for_it,
    a_release_reported_by_inventory_is_recorded_once_and_not_asked_about_again,
    an_expired_order_whose_release_went_dead_is_sent_again_like_a_cancelled_one,
);

/// Inventory's reservations as the stub answers them (404 for an order not in `known`), and
/// how many times each order was asked about.
#[derive(Clone, Default)]
struct Inventory {
    known: Arc<Mutex<HashMap<String, Value>>>,
    asked: Arc<Mutex<HashMap<String, u32>>>,
}

impl Inventory {
    fn answer(&self, order_id: &str, state: &str) {
        self.known.lock().expect("lock").insert(
            order_id.to_owned(),
            json!({"order_id": order_id, "state": state, "items": []}),
        );
    }

    fn asked(&self, order_id: &str) -> u32 {
        self.asked
            .lock()
            .expect("lock")
            .get(order_id)
            .copied()
            .unwrap_or(0)
    }
}

async fn reservation(
    State(inventory): State<Inventory>,
    headers: HeaderMap,
    Path(order_id): Path<String>,
) -> Response {
    // As inventory does with RESERVATIONS_REQUIRE_ADMIN: every test here then proves that
    // reconciliation sends the admin token.
    let bearer = format!("Bearer {STUB_ADMIN_TOKEN}");
    if headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) != Some(bearer.as_str()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    *inventory
        .asked
        .lock()
        .expect("lock")
        .entry(order_id.clone())
        .or_default() += 1;
    match inventory.known.lock().expect("lock").get(&order_id) {
        Some(body) => axum::Json(body.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

const STUB_ADMIN_TOKEN: &str = "stub-admin-token";

/// Serves `inventory`; returns reconciliation settings that look at every order at once.
async fn inventory_stub(inventory: Inventory) -> ReconcileSettings {
    let app = axum::Router::new()
        .route("/reservations/{order_id}", axum::routing::get(reservation))
        .with_state(inventory);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    ReconcileSettings {
        inventory_url: url,
        admin_token: Some(STUB_ADMIN_TOKEN.into()),
        after: Duration::ZERO,
        every: Duration::from_secs(3600),
        batch: 100,
        payment_window: PaymentWindow::OFF,
    }
}

fn id(order: &Value) -> String {
    order["order_id"].as_str().expect("id").to_owned()
}

async fn stale_pending_orders_are_settled_or_published_again(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let known = inventory.known.clone();
    let settings = inventory_stub(inventory.clone()).await;
    let reserved = app.create_order(&order_body(1, 1001, 1)).await;
    let rejected = app.create_order(&order_body(1, 1002, 1)).await;
    let unseen = app.create_order(&order_body(1, 1003, 1)).await;
    inventory.answer(&id(&reserved), "APPLIED");
    known.lock().expect("lock").insert(
        id(&rejected),
        json!({"order_id": id(&rejected), "state": "REJECTED", "items": [], "rejection_reason": "unknown_product"}),
    );
    // Their events were published (the unseen one's was lost): one still in the outbox
    // would not be sent again.
    publish(&app, "order.created").await;

    let client = reqwest::Client::new();
    let looked_at = reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 3);
    assert_eq!(app.order_status(&id(&reserved)).await, "CONFIRMED");
    assert_eq!(app.order_status(&id(&rejected)).await, "REJECTED");
    assert_eq!(app.order_status(&id(&unseen)).await, "PENDING");
    assert_eq!(
        creations(&app, &id(&unseen)).await,
        (2, 1),
        "the original event and its re-publication"
    );
}

/// `order.created` rows of the order, as (all, still pending).
async fn creations(app: &TestApp, order_id: &str) -> (i64, i64) {
    rows_of(app, "order.created", order_id).await
}

/// Outbox rows of `routing_key` for the order, as (all, still pending).
async fn rows_of(app: &TestApp, routing_key: &str, order_id: &str) -> (i64, i64) {
    let of_the_order = |status: &str| {
        let rows =
            format!("SELECT count(*) FROM outbox WHERE routing_key = '{routing_key}'{status}");
        (
            format!("{rows} AND payload->'payload'->>'order_id' = '{order_id}'"),
            format!("{rows} AND JSON_VALUE(payload, '$.payload.order_id') = '{order_id}'"),
        )
    };
    let (all, pending) = (of_the_order(""), of_the_order(" AND status = 'pending'"));
    (
        app.database.scalar(&all.0, &all.1).await,
        app.database.scalar(&pending.0, &pending.1).await,
    )
}

async fn an_unseen_order_has_one_copy_of_its_creation_waiting_however_long_the_broker_is_away(
    backend: Backend,
) {
    // The broker is unreachable: the relay publishes nothing, every new row stays pending.
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    let client = reqwest::Client::new();
    let lost = id(&app.create_order(&order_body(1, 1001, 1)).await);
    // Published before the broker went away, and lost on the way.
    publish(&app, "order.created").await;
    let waiting = id(&app.create_order(&order_body(1, 1002, 1)).await);

    for round in 1..=5 {
        reconcile_once(&app.database.database(), &client, &settings)
            .await
            .expect("round");
        assert_eq!(
            creations(&app, &lost).await,
            (2, 1),
            "round {round}: the lost original and one re-publication"
        );
        assert_eq!(
            creations(&app, &waiting).await,
            (1, 1),
            "round {round}: the original still waits to be published"
        );
    }
    assert_eq!((inventory.asked(&lost), inventory.asked(&waiting)), (5, 5));

    // The broker is back: what waited goes, inventory takes it; settled, and no more copies.
    publish(&app, "order.created").await;
    inventory.answer(&lost, "APPLIED");
    inventory.answer(&waiting, "APPLIED");
    reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    for order in [&lost, &waiting] {
        assert_eq!(app.order_status(order).await, "CONFIRMED");
    }
    assert_eq!(creations(&app, &lost).await, (2, 0));
    assert_eq!(creations(&app, &waiting).await, (1, 0));
}

async fn what_was_learned_before_an_unreadable_answer_is_written(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    // Claimed oldest first: the second answer cannot be read, the third is never asked for.
    let first = id(&app.create_order(&order_body(1, 1001, 1)).await);
    let unreadable = id(&app.create_order(&order_body(1, 1002, 1)).await);
    let third = id(&app.create_order(&order_body(1, 1003, 1)).await);
    inventory.answer(&first, "APPLIED");
    inventory.answer(&unreadable, "SOMETHING_NEW");
    inventory.answer(&third, "APPLIED");

    let round = reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings).await;
    assert!(round.is_err(), "an unreadable answer fails the round");
    assert_eq!(app.order_status(&first).await, "CONFIRMED");
    assert_eq!(app.order_status(&unreadable).await, "PENDING");
    assert_eq!(app.order_status(&third).await, "PENDING");
    assert_eq!(inventory.asked(&third), 0, "the asking stops at the error");
}

async fn an_unreachable_inventory_changes_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 1)).await;
    let settings = ReconcileSettings {
        inventory_url: "http://127.0.0.1:1".into(),
        admin_token: None,
        after: Duration::ZERO,
        every: Duration::from_secs(3600),
        batch: 100,
        payment_window: PaymentWindow::OFF,
    };
    reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!(
        app.order_status(order["order_id"].as_str().expect("id"))
            .await,
        "PENDING"
    );
    assert_eq!(app.count("outbox").await, 1);
}

/// A cancelled order whose first `order.cancelled` went `dead` in the outbox.
async fn cancelled_with_a_dead_cancellation(app: &TestApp, product_id: i64) -> String {
    let order = id(&app.create_order(&order_body(1, product_id, 1)).await);
    assert_eq!(app.cancel(&order).await.status(), 200);
    let dead = "UPDATE outbox SET status = 'dead' WHERE routing_key = 'order.cancelled'";
    let dead = app
        .database
        .execute(
            &format!("{dead} AND payload->'payload'->>'order_id' = '{order}'"),
            &format!("{dead} AND JSON_VALUE(payload, '$.payload.order_id') = '{order}'"),
        )
        .await;
    assert_eq!(dead, 1);
    order
}

/// `order.cancelled` rows of the order, as (all, still pending).
async fn cancellations(app: &TestApp, order_id: &str) -> (i64, i64) {
    rows_of(app, "order.cancelled", order_id).await
}

async fn release_recorded(app: &TestApp, order_id: &str) -> bool {
    let id = testkit::uuid_literal(app.database.backend(), order_id);
    let released = app
        .database
        .count(&format!(
            "SELECT count(*) FROM orders WHERE order_id = {id} AND released_at IS NOT NULL"
        ))
        .await;
    released == 1
}

/// Marks every pending row of `routing_key` sent, as the relay does once the broker
/// confirmed it.
async fn publish(app: &TestApp, routing_key: &str) {
    let sent = |now: &str| {
        format!(
            "UPDATE outbox SET status = 'sent', sent_at = {now} \
             WHERE routing_key = '{routing_key}' AND status = 'pending'"
        )
    };
    app.database
        .execute(&sent("now()"), &sent("CURRENT_TIMESTAMP(6)"))
        .await;
}

async fn a_cancellation_that_went_dead_is_sent_again_until_inventory_has_released_the_stock(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    let client = reqwest::Client::new();
    let order = cancelled_with_a_dead_cancellation(&app, 1001).await;
    inventory.answer(&order, "APPLIED");

    let young = ReconcileSettings {
        after: Duration::from_secs(3600),
        ..settings.clone()
    };
    let looked_at = reconcile_once(&app.database.database(), &client, &young)
        .await
        .expect("round");
    assert_eq!(
        (looked_at, inventory.asked(&order)),
        (0, 0),
        "a recent cancellation is left to the events"
    );

    let looked_at = reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 1);
    assert_eq!(
        cancellations(&app, &order).await,
        (2, 1),
        "the dead one and a new one"
    );

    // The new one has not left the outbox yet: asking again sends no third.
    reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert_eq!(inventory.asked(&order), 2);
    assert_eq!(cancellations(&app, &order).await, (2, 1));

    // Published, and inventory still holds the stock: sent again.
    publish(&app, "order.cancelled").await;
    reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert_eq!(cancellations(&app, &order).await, (3, 1));
    assert!(!release_recorded(&app, &order).await);

    // Inventory released it: recorded, and neither asked nor sent again.
    publish(&app, "order.cancelled").await;
    inventory.answer(&order, "RELEASED");
    reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert!(release_recorded(&app, &order).await);
    let looked_at = reconcile_once(&app.database.database(), &client, &settings)
        .await
        .expect("round");
    assert_eq!((looked_at, inventory.asked(&order)), (0, 4));
    assert_eq!(cancellations(&app, &order).await, (3, 0));
}

async fn a_cancelled_order_is_settled_by_what_inventory_holds_for_it(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    let unseen = cancelled_with_a_dead_cancellation(&app, 1001).await;
    let tombstoned = cancelled_with_a_dead_cancellation(&app, 1002).await;
    let rejected = cancelled_with_a_dead_cancellation(&app, 1003).await;
    inventory.answer(&tombstoned, "CANCELLED");
    inventory.answer(&rejected, "REJECTED");

    let looked_at = reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 3);
    // Never seen by inventory: the cancellation must still reach it, to leave a tombstone.
    assert_eq!(cancellations(&app, &unseen).await, (2, 1));
    assert!(!release_recorded(&app, &unseen).await);
    for nothing_held in [&tombstoned, &rejected] {
        assert_eq!(cancellations(&app, nothing_held).await, (1, 0));
        assert!(release_recorded(&app, nothing_held).await);
    }
    assert_eq!(app.order_status(&unseen).await, "CANCELLED");
}

async fn a_release_reported_by_inventory_is_recorded_once_and_not_asked_about_again(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    let order = id(&app.create_order(&order_body(1, 1001, 2)).await);
    assert_eq!(app.cancel(&order).await.status(), 200);
    let handler = InventoryEvents::new(
        app.database.database(),
        OutboxSignal::default(),
        PaymentWindow::OFF,
    );
    let released = Envelope::new(InventoryEvent::Released(StockReleased {
        order_id: OrderId(order.parse().expect("uuid")),
        items: Vec::new(),
    }));
    let delivery = || Message {
        routing_key: "inventory.released".into(),
        body: serde_json::to_vec(&released).expect("json"),
        trace: TraceContext::new_root(),
        previous_deliveries: 0,
    };
    assert_eq!(
        platform::messaging::consumer::handle(&handler, &[delivery()])
            .await
            .remove(0)
            .expect("handled"),
        Handled::Applied
    );
    assert!(release_recorded(&app, &order).await);
    assert_eq!(
        platform::messaging::consumer::handle(&handler, &[delivery()])
            .await
            .remove(0)
            .expect("handled"),
        Handled::Duplicate
    );

    let looked_at = reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!((looked_at, inventory.asked(&order)), (0, 0));
    assert_eq!(cancellations(&app, &order).await.0, 1);
}

async fn an_expired_order_whose_release_went_dead_is_sent_again_like_a_cancelled_one(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |c| {
        c.payment_window = PaymentWindow::from_secs(1);
        c.payment_expiry_every = Duration::from_millis(100);
    })
    .await;
    let inventory = Inventory::default();
    let settings = inventory_stub(inventory.clone()).await;
    let order = id(&app.create_order(&order_body(1, 1001, 1)).await);
    crate::payment::reserve(&app, &order, PaymentWindow::from_secs(1)).await;
    app.wait_for_status(&order, "EXPIRED").await;
    let dead = "UPDATE outbox SET status = 'dead' WHERE routing_key = 'order.cancelled'";
    app.database.execute(dead, dead).await;
    inventory.answer(&order, "APPLIED");

    let looked_at = reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 1);
    assert_eq!(
        cancellations(&app, &order).await,
        (2, 1),
        "the dead one and a new one"
    );
    assert_eq!(app.order_status(&order).await, "EXPIRED");

    // Inventory released it: recorded, and not asked about again.
    publish(&app, "order.cancelled").await;
    inventory.answer(&order, "RELEASED");
    reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert!(release_recorded(&app, &order).await);
    let looked_at = reconcile_once(&app.database.database(), &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 0);
}
