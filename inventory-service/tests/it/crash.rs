//! `kill -9` of the real binary in the middle of a stream of orders: after a restart every
//! order is handled exactly once, and the stock adds up (SPEC §4.3, invariants 1, 2 and 5).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use platform::testing::{self, AmqpProbe, TestDatabase, TestVhost, eventually};
use serde_json::json;
use shared::keys;
use uuid::Uuid;

fn start(db: &TestDatabase, vhost: &TestVhost, prefix: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_inventory-service"))
        .env("HTTP_ADDR", "127.0.0.1:0")
        .env("DATABASE_URL", &db.url)
        .env("REDIS_URL", testing::redis_url())
        .env("REDIS_KEY_PREFIX", prefix)
        .env("AMQP_URL", &vhost.url)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts")
}

async fn count(db: &TestDatabase, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&db.pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn an_instance_killed_mid_stream_loses_and_repeats_nothing() {
    testing::init_logs();
    let db = TestDatabase::create("inventory_crash", &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let prefix = testing::redis_prefix();
    let (stock, orders) = (150_i64, 600_i64);
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES (1, 'Crash-tested', $1)")
        .bind(stock)
        .execute(&db.pool)
        .await
        .expect("product");
    let probe = AmqpProbe::connect(&vhost.url).await;
    for _ in 0..orders {
        let event_id = Uuid::now_v7().to_string();
        let body = json!({"event_id": event_id, "version": 1, "occurred_at": chrono::Utc::now(),
            "event_type": "order.created", "payload": {"order_id": Uuid::now_v7(), "user_id": 1,
            "items": [{"product_id": 1, "quantity": 1}], "amount": "1.00"}});
        probe
            .publish(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CREATED,
                body.to_string().as_bytes(),
                Some(&event_id),
            )
            .await;
    }

    let mut first = start(&db, &vhost, &prefix);
    eventually(Duration::from_secs(60), || async {
        (count(&db, "SELECT count(*) FROM processed_messages").await >= 50).then_some(())
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let handled_before_restart = count(&db, "SELECT count(*) FROM processed_messages").await;

    let mut second = start(&db, &vhost, &prefix);
    eventually(Duration::from_secs(120), || async {
        (count(&db, "SELECT count(*) FROM processed_messages").await == orders).then_some(())
    })
    .await;
    second.kill().expect("SIGKILL");
    second.wait().expect("reaped");

    assert!(
        handled_before_restart < orders,
        "the kill landed mid-stream"
    );
    let applied = count(
        &db,
        "SELECT count(*) FROM reservations WHERE state = 'APPLIED'",
    )
    .await;
    let rejected = count(
        &db,
        "SELECT count(*) FROM reservations WHERE state = 'REJECTED'",
    )
    .await;
    let remaining = count(&db, "SELECT stock FROM products WHERE product_id = 1").await;
    assert_eq!(
        (applied, rejected),
        (stock, orders - stock),
        "one verdict per order"
    );
    assert_eq!(remaining, 0, "initial stock − final stock = units applied");
    let verdicts = count(
        &db,
        "SELECT count(*) FROM outbox WHERE routing_key LIKE 'inventory.%'",
    )
    .await;
    assert_eq!(
        verdicts, orders,
        "one event per order, none lost, none doubled"
    );
    assert_eq!(
        probe
            .ready(&keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE))
            .await,
        0
    );
}
