//! SPEC §4.2: the order and its `order.created` outbox row commit together, complete.

use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{TestApp, order_body};

#[derive(Debug, sqlx::FromRow)]
struct OutboxRow {
    event_id: Uuid,
    exchange: String,
    routing_key: String,
    payload: Value,
    headers: Value,
    status: String,
    attempts: i32,
    due: bool,
}

#[tokio::test]
async fn an_order_commits_with_a_complete_order_created_event() {
    let app = TestApp::spawn().await;
    let token = app.issue_token().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let order: Value = app
        .client
        .post(app.url("/orders"))
        .header("Idempotency-Key", &token)
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .body(order_body(5, 1001, 3).to_string())
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");

    let row: OutboxRow = sqlx::query_as(
        "SELECT event_id, exchange, routing_key, payload, headers, status, attempts, \
         next_attempt_at <= now() AS due FROM outbox",
    )
    .fetch_one(&app.db.pool)
    .await
    .expect("one outbox row");
    assert_eq!(row.exchange, "orders.events");
    assert_eq!(row.routing_key, "order.created");
    assert_eq!(
        (row.status.as_str(), row.attempts, row.due),
        ("pending", 0, true)
    );
    assert_eq!(row.payload["event_id"], row.event_id.to_string());
    assert_eq!(row.payload["event_type"], "order.created");
    assert_eq!(row.payload["version"], 1);
    let payload = &row.payload["payload"];
    assert_eq!(payload["order_id"], order["order_id"]);
    assert_eq!(payload["user_id"], 5);
    assert_eq!(payload["items"], order["items"]);
    assert_eq!(payload["amount"], "10.50");
    let traceparent = row.headers["traceparent"].as_str().expect("traceparent");
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "{traceparent}"
    );
}
