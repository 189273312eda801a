//! The real binary, killed (`kill -9`) or paused (`SIGSTOP`, past its locks' TTL) in the
//! middle of a stream of orders: every order is still handled exactly once, and the stock adds
//! up (SPEC §4.3, invariants 1, 2 and 5).

use std::process::Child;
use std::time::Duration;

use platform::testing::{self, AmqpProbe, TestDatabase, TestVhost, eventually, signal};
use serde_json::json;
use shared::keys;
use uuid::Uuid;

const STOCK: i64 = 150;
const ORDERS: i64 = 600;

fn start(db: &TestDatabase, vhost: &TestVhost, prefix: &str, env: &[(&str, &str)]) -> Child {
    testing::service_command(
        env!("CARGO_BIN_EXE_inventory-service"),
        &db.url,
        &vhost.url,
        prefix,
    )
    .envs(env.iter().copied())
    .env("HTTP_ADDR", "127.0.0.1:0")
    .spawn()
    .expect("the binary starts")
}

async fn count(db: &TestDatabase, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&db.pool)
        .await
        .expect("count")
}

async fn processed(db: &TestDatabase) -> i64 {
    count(db, "SELECT count(*) FROM processed_messages").await
}

/// A product with [`STOCK`] units and [`ORDERS`] one-unit orders for it already queued, as
/// order-service would have published them.
async fn stream_of_orders(name: &str) -> (TestDatabase, TestVhost, AmqpProbe) {
    testing::init_logs();
    let db = TestDatabase::create(name, &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES (1, 'Under test', $1)")
        .bind(STOCK)
        .execute(&db.pool)
        .await
        .expect("product");
    let probe = AmqpProbe::connect(&vhost.url).await;
    for _ in 0..ORDERS {
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
    (db, vhost, probe)
}

/// One verdict per order, stock consumed exactly by the applied ones, nothing dead-lettered.
async fn assert_every_order_handled_once(db: &TestDatabase, probe: &AmqpProbe) {
    let applied = count(
        db,
        "SELECT count(*) FROM reservations WHERE state = 'APPLIED'",
    )
    .await;
    let rejected = count(
        db,
        "SELECT count(*) FROM reservations WHERE state = 'REJECTED'",
    )
    .await;
    let remaining = count(db, "SELECT stock FROM products WHERE product_id = 1").await;
    assert_eq!(
        (applied, rejected),
        (STOCK, ORDERS - STOCK),
        "one verdict per order"
    );
    assert_eq!(remaining, 0, "initial stock − final stock = units applied");
    let verdicts = count(
        db,
        "SELECT count(*) FROM outbox WHERE routing_key LIKE 'inventory.%'",
    )
    .await;
    assert_eq!(
        verdicts, ORDERS,
        "one event per order, none lost, none doubled"
    );
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0);
}

#[tokio::test]
async fn an_instance_killed_mid_stream_loses_and_repeats_nothing() {
    let (db, vhost, probe) = stream_of_orders("inventory_crash").await;
    let prefix = testing::redis_prefix();
    let mut first = start(&db, &vhost, &prefix, &[]);
    eventually(Duration::from_secs(60), || async {
        (processed(&db).await >= 50).then_some(())
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let handled_before_restart = processed(&db).await;

    let mut second = start(&db, &vhost, &prefix, &[]);
    eventually(Duration::from_secs(120), || async {
        (processed(&db).await == ORDERS).then_some(())
    })
    .await;
    second.kill().expect("SIGKILL");
    second.wait().expect("reaped");

    assert!(
        handled_before_restart < ORDERS,
        "the kill landed mid-stream"
    );
    assert_every_order_handled_once(&db, &probe).await;
}

#[tokio::test]
async fn an_instance_paused_past_its_lock_ttl_cannot_oversell_or_double_apply() {
    let (db, vhost, probe) = stream_of_orders("inventory_pause").await;
    let prefix = testing::redis_prefix();
    // Short locks, so the pause outlives them; both instances consume the same queue.
    let short_locks = [("LOCK_TTL_MS", "300")];
    let mut paused = start(&db, &vhost, &prefix, &short_locks);
    let mut other = start(&db, &vhost, &prefix, &short_locks);
    eventually(Duration::from_secs(60), || async {
        (processed(&db).await >= 50).then_some(())
    })
    .await;

    signal(&paused, "STOP");
    // The pause is the scenario's input, not a wait for a condition: three lock TTLs, so
    // every lock the paused instance held expires and the other instance can take it. (The
    // other one may still wait on a row the paused one had locked in PostgreSQL; then it
    // goes on once the paused one resumes, finds its lock lost before commit and rolls back.)
    tokio::time::sleep(Duration::from_millis(900)).await;
    signal(&paused, "CONT");

    eventually(Duration::from_secs(120), || async {
        (processed(&db).await == ORDERS).then_some(())
    })
    .await;
    for child in [&mut paused, &mut other] {
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }
    assert_every_order_handled_once(&db, &probe).await;
}
