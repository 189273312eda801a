//! docs/contract.md §4.4: a consumer channel the broker closes is replaced within seconds
//! while the consumer's other channels go on, against a real RabbitMQ vhost of the test's own.
//!
//! One channel sits on a message its handler holds; the broker then closes the other one (a
//! `basic.ack` of an unknown delivery tag, injected into that channel's process on the broker:
//! RabbitMQ answers it with `channel.close` 406 PRECONDITION_FAILED, as for a client's own
//! mistake). With a prefetch of one, a message published after that can only be consumed by
//! a replacement of the closed channel.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use platform::messaging::broker::Broker;
use platform::messaging::consumer::{
    CONSUMER_CHANNELS_REPLACED_TOTAL, ConsumeError, ConsumerSettings, Handled, Handler, Message,
    Outcome,
};
use shared::keys;
use tokio_util::sync::CancellationToken;

const HELD: &[u8] = b"held";

/// Records what it applied; sits on [`HELD`] until `release`.
#[derive(Clone, Default)]
struct Holding {
    holding: CancellationToken,
    release: CancellationToken,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    applied: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Holding {
    fn applied(&self, body: &[u8]) -> bool {
        self.applied
            .lock()
            .expect("applied")
            .iter()
            .any(|b| b == body)
    }
}

impl Handler for Holding {
    type Work = Vec<u8>;

    fn parse(&self, message: &Message) -> Result<Vec<u8>, ConsumeError> {
        Ok(message.body.clone())
    }

    async fn apply_batch(&self, bodies: &[Vec<u8>]) -> Result<Vec<Outcome>, ConsumeError> {
        self.seen.lock().expect("seen").extend_from_slice(bodies);
        if bodies.iter().any(|body| body == HELD) {
            self.holding.cancel();
            self.release.cancelled().await;
        }
        self.applied
            .lock()
            .expect("applied")
            .extend_from_slice(bodies);
        Ok(bodies.iter().map(|_| Ok(Handled::Applied)).collect())
    }
}

// The harness is testkit's, which builds on this crate; these few lines stand in for its
// vhost guard and probe rather than make the dependency a cycle.

fn rabbitmqctl(args: &[&str]) -> String {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Evaluates `expression` on the local RabbitMQ node.
fn eval(expression: &str) -> String {
    rabbitmqctl(&["eval", expression])
}

/// A vhost of this test's own, deleted with the guard.
struct Vhost {
    name: String,
    url: String,
}

impl Vhost {
    fn create() -> Self {
        let name = format!("test-{}", uuid::Uuid::new_v4().simple());
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        let server =
            platform::config::string("TEST_AMQP_SERVER", "amqp://guest:guest@127.0.0.1:5672");
        let url = format!("{server}/{name}");
        Self { name, url }
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

/// A plain client's channel in `vhost`, after declaring the services' topology there.
async fn probe(vhost: &Vhost) -> (lapin::Connection, lapin::Channel) {
    let conn = lapin::Connection::connect(&vhost.url, lapin::ConnectionProperties::default())
        .await
        .expect("AMQP connection");
    let channel = conn.create_channel().await.expect("channel");
    platform::messaging::topology::declare_topology(&channel)
        .await
        .expect("topology");
    (conn, channel)
}

async fn publish(channel: &lapin::Channel, body: &[u8]) {
    channel
        .basic_publish(
            keys::ORDERS_EXCHANGE.into(),
            keys::ORDER_CREATED.into(),
            lapin::options::BasicPublishOptions::default(),
            body,
            lapin::BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("published");
}

async fn ready(channel: &lapin::Channel, queue: &str) -> u32 {
    let passive = lapin::options::QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), passive, lapin::types::FieldTable::default())
        .await
        .expect("passive declare")
        .message_count()
}

/// Polls `check` every 20 ms until it holds; fails the test after `deadline`.
async fn eventually<F, Fut>(deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + deadline;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < until,
            "condition not met within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many client connections `vhost` has.
fn connections(vhost: &str) -> usize {
    rabbitmqctl(&["-q", "list_connections", "--no-table-headers", "vhost"])
        .lines()
        .filter(|line| line.trim() == vhost)
        .count()
}

/// The broker's channels in `vhost` that have a consumer and, when `unacked` is given, that
/// many deliveries unacknowledged, as an Erlang list comprehension (a channel that ends
/// while it is asked is left out).
fn consuming_channels(vhost: &str, unacked: Option<u32>) -> String {
    let unacked = unacked.map_or_else(|| "true".to_owned(), |n| format!("U =:= {n}"));
    format!(
        "[P || P <- rabbit_channel:list_local(), \
           [{{vhost, V}}, {{consumer_count, C}}, {{messages_unacknowledged, U}}] <- \
             [catch rabbit_channel:info(P, [vhost, consumer_count, messages_unacknowledged])], \
           V =:= <<\"{vhost}\">>, C > 0, {unacked}]"
    )
}

fn count_consuming_channels(vhost: &str) -> usize {
    let count = eval(&format!("length({}).", consuming_channels(vhost, None)));
    count.parse().expect("a count")
}

/// Makes the broker close the one consuming channel of `vhost` that holds no delivery.
fn close_the_idle_channel(vhost: &str) {
    let outcome = eval(&format!(
        "case {} of \
           [Pid] -> rabbit_channel:do(Pid, {{'basic.ack', 1000000, false}}), closed; \
           Other -> {{expected_one_idle_channel, length(Other)}} \
         end.",
        consuming_channels(vhost, Some(0))
    ));
    assert_eq!(outcome, "closed");
}

fn replacements() -> u64 {
    let rendered = platform::telemetry::metrics::handle().render();
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{CONSUMER_CHANNELS_REPLACED_TOTAL} ")))
        .map_or(0, |value| value.trim().parse().expect("a counter"))
}

// rabbitmqctl blocks its thread for a moment: the consumer runs on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_broker_closes_is_replaced_while_the_other_keeps_consuming() {
    let logs = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(logs)
        .with_test_writer()
        .try_init();
    platform::messaging::consumer::register_metrics();
    let vhost = Vhost::create();
    let (_conn, probe) = probe(&vhost).await;
    // Only a handler failure would use the database (to wait for it): none fails here, so
    // the pool never connects.
    let server =
        platform::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432");
    let db = sqlx::PgPool::connect_lazy(&format!("{server}/postgres")).expect("a pool");
    let stop = CancellationToken::new();
    let broker = Broker::new(&vhost.url, None);
    tokio::spawn(broker.clone().supervise(stop.clone()));
    let handler = Holding::default();
    let consumer = tokio::spawn(platform::messaging::consumer::run(
        broker,
        db,
        ConsumerSettings {
            queue: keys::INVENTORY_ORDER_EVENTS_QUEUE,
            consumer_tag: format!("replaced-test-{}", uuid::Uuid::new_v4()),
            prefetch: 1,
            concurrency: 2,
            linger: Default::default(),
        },
        handler.clone(),
        stop.clone(),
    ));
    eventually(Duration::from_secs(10), || async {
        count_consuming_channels(&vhost.name) == 2
    })
    .await;

    publish(&probe, HELD).await;
    tokio::time::timeout(Duration::from_secs(10), handler.holding.cancelled())
        .await
        .expect("one channel holds the first message");
    close_the_idle_channel(&vhost.name);

    publish(&probe, b"after").await;
    eventually(Duration::from_secs(5), || async {
        handler.applied(b"after")
    })
    .await;
    assert!(
        !handler.applied(HELD),
        "the other channel still holds its message"
    );
    assert_eq!(replacements(), 1);
    assert_eq!(
        connections(&vhost.name),
        2,
        "the probe's and the service's one: a channel's error keeps the connection"
    );

    handler.release.cancel();
    eventually(Duration::from_secs(5), || async { handler.applied(HELD) }).await;
    assert_eq!(count_consuming_channels(&vhost.name), 2);
    let seen = handler.seen.lock().expect("seen").clone();
    assert_eq!(
        seen.iter().filter(|body| *body == HELD).count(),
        1,
        "the channel that kept running was never interrupted: {seen:?}"
    );
    // Its ack went through: nothing is ready again, nothing unacknowledged.
    eventually(Duration::from_secs(5), || async {
        eval(&format!(
            "length({}).",
            consuming_channels(&vhost.name, Some(0))
        )) == "2"
    })
    .await;
    assert_eq!(ready(&probe, keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .expect("the consumer stops at shutdown")
        .expect("without a panic");
}
