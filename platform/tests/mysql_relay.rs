//! docs/database-backends.md: the outbox relay on MySQL / MariaDB publishes every row once,
//! however many relays share the outbox, marks what the broker confirmed, and counts failed
//! publishes down to `dead` — the same relay as on PostgreSQL, over the MySQL store. Against
//! the machine's MariaDB and RabbitMQ, a database and a vhost per test.

use std::collections::HashSet;
use std::time::Duration;

use platform::messaging::broker::Broker;
use platform::messaging::outbox::{NewOutboxRow, OutboxSignal};
use platform::messaging::relay::{self, RelaySettings};
use platform::storage::mysql::MySqlStore;
use platform_mysql::outbox::{self, NewRow};
use shared::keys;
use sqlx::MySqlPool;
use testkit::mysql::TestMySqlDatabase;
use testkit::{AmqpProbe, TestVhost, eventually};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/order-service/mysql");

const WAIT: Duration = Duration::from_secs(15);

/// `count` rows for `exchange` / `routing_key`, as another process's writer left them.
fn rows(count: usize, exchange: &str, routing_key: &'static str) -> Vec<NewOutboxRow> {
    (0..count)
        .map(|n| NewOutboxRow {
            event_id: Uuid::now_v7(),
            exchange: exchange.to_owned(),
            routing_key,
            payload: serde_json::json!({ "n": n }),
            headers: serde_json::json!({}),
        })
        .collect()
}

async fn write(pool: &MySqlPool, rows: &[NewOutboxRow]) {
    let new: Vec<NewRow<'_>> = rows
        .iter()
        .map(|row| NewRow {
            event_id: row.event_id,
            exchange: &row.exchange,
            routing_key: row.routing_key,
            payload: &row.payload,
            headers: &row.headers,
        })
        .collect();
    let mut conn = pool.acquire().await.expect("connection");
    outbox::insert(&mut conn, &new).await.expect("outbox rows");
}

async fn count_where(pool: &MySqlPool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status = ?")
        .bind(status)
        .fetch_one(pool)
        .await
        .expect("count")
}

struct Relays {
    broker: Broker,
    stop: CancellationToken,
}

impl Relays {
    fn new(vhost: &TestVhost) -> Self {
        let broker = Broker::new(&vhost.url, None);
        let stop = CancellationToken::new();
        tokio::spawn(broker.clone().supervise(stop.clone()));
        Self { broker, stop }
    }

    fn start(&self, pool: &MySqlPool, settings: RelaySettings, signal: OutboxSignal) {
        tokio::spawn(relay::run(
            MySqlStore(pool.clone()),
            self.broker.clone(),
            settings,
            signal,
            self.stop.clone(),
        ));
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[tokio::test]
async fn several_relays_on_mysql_publish_each_row_exactly_once() {
    let db = TestMySqlDatabase::create("mysql_relay_once", &ORDERS).await;
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    let written = rows(300, "orders.events", "order.cancelled");
    write(&db.pool, &written).await;
    let relays = Relays::new(&vhost);
    for _ in 0..3 {
        // Rows none of them wrote reach them by the sweep, claimed `SKIP LOCKED`.
        let settings = RelaySettings {
            batch_size: 7,
            sweep_after: Duration::ZERO,
            ..Default::default()
        };
        relays.start(&db.pool, settings, OutboxSignal::default());
    }
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, written.len(), WAIT)
        .await;
    let ids: HashSet<_> = messages
        .iter()
        .filter_map(|m| m.message_id.clone())
        .collect();
    assert_eq!(messages.len(), written.len());
    assert_eq!(ids.len(), written.len(), "no row published twice");
    let expected: HashSet<_> = written.iter().map(|r| r.event_id.to_string()).collect();
    assert_eq!(ids, expected);
    eventually(WAIT, || async {
        (count_where(&db.pool, "sent").await == written.len() as i64).then_some(())
    })
    .await;
    assert_eq!(probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);
}

#[tokio::test]
async fn rows_handed_over_in_memory_are_published_and_marked_sent_on_mysql() {
    let db = TestMySqlDatabase::create("mysql_relay_own", &ORDERS).await;
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    let relays = Relays::new(&vhost);
    let signal = OutboxSignal::default();
    // The sweep would wait a minute for these: only the hand-over can publish them in time.
    let settings = RelaySettings {
        sweep_after: Duration::from_secs(60),
        ..Default::default()
    };
    relays.start(&db.pool, settings, signal.clone());
    let written = rows(20, "orders.events", "order.cancelled");
    write(&db.pool, &written).await;
    signal.committed(written.clone());
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, written.len(), WAIT)
        .await;
    assert_eq!(messages.len(), written.len());
    eventually(WAIT, || async {
        (count_where(&db.pool, "sent").await == written.len() as i64).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_unroutable_row_on_mysql_is_retried_then_dead() {
    let db = TestMySqlDatabase::create("mysql_relay_dead", &ORDERS).await;
    let vhost = TestVhost::create();
    // Declares the topology: `inventory.events` exists, nothing is bound to this key.
    let _probe = AmqpProbe::connect(&vhost.url).await;
    let relays = Relays::new(&vhost);
    let settings = RelaySettings {
        max_attempts: 3,
        sweep_after: Duration::ZERO,
        base_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        ..Default::default()
    };
    relays.start(&db.pool, settings, OutboxSignal::default());
    write(&db.pool, &rows(1, "inventory.events", "nowhere.at.all")).await;
    let (attempts, error): (i32, Option<String>) = eventually(WAIT, || async {
        sqlx::query_as("SELECT attempts, last_error FROM outbox WHERE status = 'dead'")
            .fetch_optional(&db.pool)
            .await
            .expect("dead rows")
    })
    .await;
    assert_eq!(attempts, 3, "dead at its last attempt, not before");
    assert!(
        error.as_deref().is_some_and(|e| e.contains("unroutable")),
        "{error:?}"
    );
    assert_eq!(count_where(&db.pool, "pending").await, 0);
}
