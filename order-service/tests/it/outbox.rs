//! docs/contract.md §4.2: the order and its `order.created` outbox row commit together, complete.
//! On either backend.

use std::time::Duration;

use serde_json::Value;
use testkit::{Backend, BackendDatabase, uuid_literal};
use uuid::Uuid;

use crate::helpers::{TestApp, eventually, order_body};

testkit::on_each_backend!(
    an_order_commits_with_a_complete_order_created_event,
    sent_rows_and_processed_ids_past_their_retention_are_deleted_in_batches,
);

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

/// The one outbox row. MySQL's DATETIME columns hold UTC (the services' sessions run in
/// UTC), so its row is due against the UTC clock.
async fn the_outbox_row(database: &BackendDatabase) -> OutboxRow {
    const COLUMNS: &str =
        "SELECT event_id, exchange, routing_key, payload, headers, status, attempts";
    let postgres = format!("{COLUMNS}, next_attempt_at <= now() AS due FROM outbox");
    let mysql = format!("{COLUMNS}, next_attempt_at <= UTC_TIMESTAMP(6) AS due FROM outbox");
    match database {
        BackendDatabase::Postgres(db) => {
            sqlx::query_as(sqlx::AssertSqlSafe(postgres))
                .fetch_one(&db.pool)
                .await
        }
        BackendDatabase::MySql(db) => {
            sqlx::query_as(sqlx::AssertSqlSafe(mysql))
                .fetch_one(&db.pool)
                .await
        }
    }
    .expect("one outbox row")
}

async fn an_order_commits_with_a_complete_order_created_event(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
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

    let row = the_outbox_row(&app.database).await;
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

/// `hours` before now, as `backend`'s statements write a time (UTC on MySQL, whose DATETIME
/// columns hold UTC).
fn hours_ago(backend: Backend, hours: u32) -> String {
    match backend {
        Backend::Postgres => format!("now() - interval '{hours} hours'"),
        Backend::MySql => format!("UTC_TIMESTAMP(6) - INTERVAL {hours} HOUR"),
    }
}

/// The outbox's statuses, in order.
async fn statuses(database: &BackendDatabase) -> Vec<String> {
    let read = "SELECT status FROM outbox ORDER BY status";
    match database {
        BackendDatabase::Postgres(db) => sqlx::query_scalar(read).fetch_all(&db.pool).await,
        BackendDatabase::MySql(db) => sqlx::query_scalar(read).fetch_all(&db.pool).await,
    }
    .expect("statuses")
}

async fn sent_rows_and_processed_ids_past_their_retention_are_deleted_in_batches(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| {
        c.messaging.retention.keep = Duration::from_secs(3600);
        c.messaging.retention.sweep_every = Duration::from_millis(100);
        c.messaging.retention.batch = 2;
    })
    .await;
    let id = || uuid_literal(backend, &Uuid::new_v4().to_string());
    let ago = |hours| hours_ago(backend, hours);
    // Five rows sent two hours ago, one sent now, one dead; all created three hours ago.
    let sent_at = [Some(2), Some(2), Some(2), Some(2), Some(2), Some(0), None];
    let outbox: Vec<String> = sent_at
        .iter()
        .map(|sent_at| {
            let (status, sent_at) = match sent_at {
                Some(hours) => ("sent", ago(*hours)),
                None => ("dead", "NULL".to_owned()),
            };
            format!(
                "({}, 'orders.events', 'order.created', '{{}}', '{status}', {sent_at}, {})",
                id(),
                ago(3)
            )
        })
        .collect();
    let seed = format!(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, status, sent_at, created_at) \
         VALUES {}",
        outbox.join(", ")
    );
    app.database.execute(&seed, &seed).await;
    // Three ids processed two hours ago, one now.
    let processed: Vec<String> = [2, 2, 2, 0]
        .iter()
        .map(|hours| format!("({}, 'inventory.reserved', {})", id(), ago(*hours)))
        .collect();
    let seed = format!(
        "INSERT INTO processed_messages (message_id, kind, processed_at) VALUES {}",
        processed.join(", ")
    );
    app.database.execute(&seed, &seed).await;

    eventually(Duration::from_secs(10), || async {
        let kept = (
            app.count("outbox").await,
            app.count("processed_messages").await,
        );
        (kept == (2, 1)).then_some(())
    })
    .await;
    assert_eq!(
        statuses(&app.database).await,
        ["dead", "sent"],
        "dead rows wait for an operator; recent sent rows stay"
    );
    let recent = |table: &str, column: &str| {
        format!("SELECT count(*) FROM {table} WHERE {column} > {}", ago(1))
    };
    assert_eq!(
        app.database.count(&recent("outbox", "sent_at")).await,
        1,
        "the row sent now is the one kept"
    );
    assert_eq!(
        app.database
            .count(&recent("processed_messages", "processed_at"))
            .await,
        1,
        "the id processed now is the one kept"
    );
}
