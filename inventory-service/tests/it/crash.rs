//! The real binary, killed (`kill -9`) or paused (`SIGSTOP`, past its locks' TTL) in the
//! middle of a stream of orders, on PostgreSQL and on MariaDB: every order is still handled exactly once, and the stock adds
//! up (docs/contract.md §4.3, invariants 1, 2 and 5).

use std::time::Duration;

use shared::keys;
use testkit::{
    self, AmqpProbe, Backend, BackendDatabase, KilledOnDrop, TestVhost, eventually, signal,
};
use uuid::Uuid;

use crate::helpers::publish_order_created;

const STOCK: i64 = 150;
const ORDERS: i64 = 600;
/// The backlog the pause scenario starts with; it tops the stream up by as much whenever the
/// instances come near its end before a pause caught a lock (a fast machine drains it within
/// a few pauses).
const ORDERS_FOR_PAUSES: i64 = 2000;
/// The most the pause scenario publishes before it gives up finding a pause that caught a lock.
const MOST_ORDERS_FOR_PAUSES: i64 = 5 * ORDERS_FOR_PAUSES;

fn start(
    db: &BackendDatabase,
    vhost: &TestVhost,
    prefix: &str,
    env: &[(&str, &str)],
) -> KilledOnDrop {
    let child = testkit::service_command(
        env!("CARGO_BIN_EXE_inventory-service"),
        db.url(),
        &vhost.url,
        prefix,
    )
    .env("HTTP_ADDR", "127.0.0.1:0")
    .envs(env.iter().copied())
    .spawn()
    .expect("the binary starts");
    KilledOnDrop(child)
}

async fn processed(db: &BackendDatabase) -> i64 {
    db.count("SELECT count(*) FROM processed_messages").await
}

/// A product with [`STOCK`] units and `orders` one-unit orders for it already queued, as
/// order-service would have published them.
async fn stream_of_orders(
    backend: Backend,
    name: &str,
    orders: i64,
) -> (BackendDatabase, TestVhost, AmqpProbe) {
    testkit::init_logs();
    let db = BackendDatabase::create(backend, name, inventory_service::migrators()).await;
    let vhost = TestVhost::create();
    let product =
        format!("INSERT INTO products (product_id, name, stock) VALUES (1, 'Under test', {STOCK})");
    db.execute(&product, &product).await;
    let probe = AmqpProbe::connect(&vhost.url).await;
    for _ in 0..orders {
        publish_order_created(&probe, Uuid::now_v7(), &[(1, 1)]).await;
    }
    (db, vhost, probe)
}

/// One verdict per order, stock consumed exactly by the applied ones, nothing dead-lettered.
async fn assert_every_order_handled_once(db: &BackendDatabase, probe: &AmqpProbe, orders: i64) {
    let applied = db
        .count("SELECT count(*) FROM reservations WHERE state = 'APPLIED'")
        .await;
    let rejected = db
        .count("SELECT count(*) FROM reservations WHERE state = 'REJECTED'")
        .await;
    let remaining = db
        .count("SELECT stock FROM products WHERE product_id = 1")
        .await;
    assert_eq!(
        (applied, rejected),
        (STOCK, orders - STOCK),
        "one verdict per order"
    );
    assert_eq!(remaining, 0, "initial stock − final stock = units applied");
    let verdicts = db
        .count("SELECT count(*) FROM outbox WHERE routing_key LIKE 'inventory.%'")
        .await;
    assert_eq!(
        verdicts, orders,
        "one event per order, none lost, none doubled"
    );
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0);
}

testkit::on_each_backend!(
    an_instance_killed_mid_stream_loses_and_repeats_nothing,
    an_instance_paused_past_its_lock_ttl_loses_its_lock_and_cannot_oversell_or_double_apply,
);

async fn an_instance_killed_mid_stream_loses_and_repeats_nothing(backend: Backend) {
    let (db, vhost, probe) = stream_of_orders(backend, "inventory_crash", ORDERS).await;
    let prefix = testkit::redis_prefix();
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
    assert_every_order_handled_once(&db, &probe, ORDERS).await;
}

async fn an_instance_paused_past_its_lock_ttl_loses_its_lock_and_cannot_oversell_or_double_apply(
    backend: Backend,
) {
    let (db, vhost, probe) = stream_of_orders(backend, "inventory_pause", ORDERS_FOR_PAUSES).await;
    let prefix = testkit::redis_prefix();
    // Short locks, so the pause outlives them; both instances consume the same queue. Batches
    // of one message: the instances then hold the product's lock most of the time, so a pause
    // catches one holding it (larger batches hold it for a moment per batch, and finish the
    // stream within a pause or two).
    let port = testkit::free_port();
    let paused_addr = format!("127.0.0.1:{port}");
    let mut paused = start(
        &db,
        &vhost,
        &prefix,
        &[
            ("LOCK_TTL_MS", "300"),
            ("HTTP_ADDR", &paused_addr),
            ("CONSUMER_PREFETCH", "1"),
            ("CONSUMER_CONCURRENCY", "1"),
        ],
    );
    let mut other = start(
        &db,
        &vhost,
        &prefix,
        &[
            ("LOCK_TTL_MS", "300"),
            ("CONSUMER_PREFETCH", "1"),
            ("CONSUMER_CONCURRENCY", "1"),
        ],
    );
    eventually(Duration::from_secs(60), || async {
        (processed(&db).await >= 50).then_some(())
    })
    .await;

    // A pause only proves something if it caught the instance holding a lock, which it does
    // nearly always with a backlog on one product; pause again until it did (each pause is
    // the scenario's input, not a wait: three lock TTLs, so every lock the paused instance
    // held expires and the other instance can take it).
    let paused_base = format!("http://{paused_addr}");
    let lost = r#"lock_acquisitions_total{result="lost",backend="redis"}"#;
    let mut published = ORDERS_FOR_PAUSES;
    let mut pauses = 0;
    while testkit::scrape_metric(&paused_base, lost).await < 1.0 {
        assert!(
            pauses < 40,
            "no pause caught the instance holding a lock ({pauses} pauses, {published} orders)"
        );
        // A pause needs a backlog to catch a holder: keep one queued.
        if published < MOST_ORDERS_FOR_PAUSES
            && processed(&db).await > published - ORDERS_FOR_PAUSES / 4
        {
            for _ in 0..ORDERS_FOR_PAUSES {
                publish_order_created(&probe, Uuid::now_v7(), &[(1, 1)]).await;
            }
            published += ORDERS_FOR_PAUSES;
        }
        signal(&paused, "STOP");
        tokio::time::sleep(Duration::from_millis(900)).await;
        signal(&paused, "CONT");
        pauses += 1;
        // Give the resumed instance the moment it needs to find out and answer /metrics.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // One message per batch is slow when the whole suite shares two cores: a generous
    // deadline, since only the outcome counts here.
    eventually(Duration::from_secs(600), || async {
        (processed(&db).await == published).then_some(())
    })
    .await;
    for child in [&mut paused, &mut other] {
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }
    // The holder that lost its lock rolled back: every order still has exactly one verdict.
    assert_every_order_handled_once(&db, &probe, published).await;
}
