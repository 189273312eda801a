//! Reconciliation of orders left `PENDING`: settled from inventory's reservation record,
//! or published again when inventory never saw them. Inventory is played by a small HTTP
//! server here; the end-to-end suite runs the real one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use order_service::messaging::reconcile::{ReconcileSettings, reconcile_once};
use serde_json::{Value, json};

use crate::helpers::{TestApp, order_body};

type Reservations = Arc<Mutex<HashMap<String, Value>>>;

async fn reservation(State(known): State<Reservations>, Path(order_id): Path<String>) -> Response {
    match known.lock().expect("lock").get(&order_id) {
        Some(body) => axum::Json(body.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn inventory_stub(known: Reservations) -> String {
    let app = axum::Router::new()
        .route("/reservations/{order_id}", axum::routing::get(reservation))
        .with_state(known);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn stale_pending_orders_are_settled_or_published_again() {
    let app = TestApp::spawn().await;
    let known = Reservations::default();
    let settings = ReconcileSettings {
        inventory_url: inventory_stub(known.clone()).await,
        after: Duration::ZERO,
        every: Duration::from_secs(3600),
        batch: 100,
    };
    let reserved = app.create_order(&order_body(1, 1001, 1)).await;
    let rejected = app.create_order(&order_body(1, 1002, 1)).await;
    let unseen = app.create_order(&order_body(1, 1003, 1)).await;
    let id = |o: &Value| o["order_id"].as_str().expect("id").to_owned();
    known.lock().expect("lock").insert(
        id(&reserved),
        json!({"order_id": id(&reserved), "state": "APPLIED", "items": []}),
    );
    known.lock().expect("lock").insert(
        id(&rejected),
        json!({"order_id": id(&rejected), "state": "REJECTED", "items": [], "rejection_reason": "unknown_product"}),
    );

    let client = reqwest::Client::new();
    let looked_at = reconcile_once(&app.db.pool, &client, &settings)
        .await
        .expect("round");
    assert_eq!(looked_at, 3);
    assert_eq!(app.order_status(&id(&reserved)).await, "CONFIRMED");
    assert_eq!(app.order_status(&id(&rejected)).await, "REJECTED");
    assert_eq!(app.order_status(&id(&unseen)).await, "PENDING");
    let republished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE routing_key = 'order.created' AND payload->'payload'->>'order_id' = $1",
    )
    .bind(id(&unseen))
    .fetch_one(&app.db.pool)
    .await
    .expect("count");
    assert_eq!(republished, 2, "the original event and its re-publication");
}

#[tokio::test]
async fn an_unreachable_inventory_changes_nothing() {
    let app = TestApp::spawn().await;
    let order = app.create_order(&order_body(1, 1001, 1)).await;
    let settings = ReconcileSettings {
        inventory_url: "http://127.0.0.1:1".into(),
        after: Duration::ZERO,
        every: Duration::from_secs(3600),
        batch: 100,
    };
    reconcile_once(&app.db.pool, &reqwest::Client::new(), &settings)
        .await
        .expect("round");
    assert_eq!(
        app.order_status(order["order_id"].as_str().expect("id"))
            .await,
        "PENDING"
    );
    assert_eq!(app.count("outbox").await, 1);
}
