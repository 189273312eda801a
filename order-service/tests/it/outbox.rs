//! docs/contract.md §4.2: the order and its `order.created` outbox row commit together, complete.

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
    .fetch_one(&app.db().pool)
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

#[tokio::test]
async fn sent_rows_and_processed_ids_past_their_retention_are_deleted_in_batches() {
    let app = TestApp::spawn_with(|c| {
        c.messaging.retention.keep = std::time::Duration::from_secs(3600);
        c.messaging.retention.sweep_every = std::time::Duration::from_millis(100);
        c.messaging.retention.batch = 2;
    })
    .await;
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, status, sent_at, created_at) \
         SELECT gen_random_uuid(), 'orders.events', 'order.created', '{}', status, sent_at, now() - interval '3 hours' \
         FROM (VALUES ('sent', now() - interval '2 hours'), ('sent', now() - interval '2 hours'), \
                      ('sent', now() - interval '2 hours'), ('sent', now() - interval '2 hours'), \
                      ('sent', now() - interval '2 hours'), ('sent', now()), \
                      ('dead', NULL::timestamptz)) AS r(status, sent_at)",
    )
    .execute(&app.db().pool)
    .await
    .expect("seed outbox");
    sqlx::query(
        "INSERT INTO processed_messages (message_id, kind, processed_at) \
         SELECT gen_random_uuid(), 'inventory.reserved', at \
         FROM (VALUES (now() - interval '2 hours'), (now() - interval '2 hours'), \
                      (now() - interval '2 hours'), (now())) AS r(at)",
    )
    .execute(&app.db().pool)
    .await
    .expect("seed processed messages");
    crate::helpers::eventually(std::time::Duration::from_secs(10), || async {
        let kept = (
            app.count("outbox").await,
            app.count("processed_messages").await,
        );
        (kept == (2, 1)).then_some(())
    })
    .await;
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM outbox ORDER BY status")
        .fetch_all(&app.db().pool)
        .await
        .expect("statuses");
    assert_eq!(
        statuses,
        ["dead", "sent"],
        "dead rows wait for an operator; recent sent rows stay"
    );
}
