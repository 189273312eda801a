//! The consumer loop hands what is buffered to the handler as one batch (never more than the
//! prefetch), settles every message by its own outcome, and keeps contended messages in
//! process: they are tried again without the broker counting a delivery. While busy, it waits
//! a moment for a batch to fill.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use platform::messaging::broker::Broker;
use platform::messaging::consumer::{
    ConsumeError, ConsumerSettings, Handled, Handler, Message, Outcome,
};
use platform::messaging::linger::Linger;
use shared::keys;
use testkit::{AmqpProbe, TestDatabase, TestVhost, eventually};
use tokio_util::sync::CancellationToken;

const PREFETCH: u16 = 8;
const MESSAGES: usize = 30;
/// How many times the contended message finds its resource busy: past its round budget
/// twice, so it is sent back to the queue on the way (a fresh delivery each time).
const BUSY_TRIES: u32 = 2 * platform::messaging::consumer::KEPT_ROUNDS + 1;

#[derive(Clone, Default)]
struct Recording {
    /// The size of every batch handed over.
    batches: Arc<Mutex<Vec<usize>>>,
    /// Every delivery count the contended message was seen with.
    contended_seen: Arc<Mutex<Vec<i64>>>,
    applied: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Handler for Recording {
    type Work = Message;

    fn parse(&self, message: &Message) -> Result<Message, ConsumeError> {
        Ok(message.clone())
    }

    async fn apply_batch(&self, messages: &[Message]) -> Result<Vec<Outcome>, ConsumeError> {
        self.batches.lock().expect("batches").push(messages.len());
        Ok(messages
            .iter()
            .map(|m| {
                if m.body == b"busy" {
                    let mut seen = self.contended_seen.lock().expect("seen");
                    seen.push(m.previous_deliveries);
                    if seen.len() <= BUSY_TRIES as usize {
                        return Err(ConsumeError::Contention("busy".into()));
                    }
                }
                self.applied.lock().expect("applied").push(m.body.clone());
                Ok(Handled::Applied)
            })
            .collect())
    }
}

/// Runs the consumer loop on the inventory's queue of `vhost` with one channel, until the
/// returned token is cancelled.
fn start(
    vhost: &TestVhost,
    db: &TestDatabase,
    prefetch: u16,
    linger: Linger,
    handler: &Recording,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let broker = Broker::new(&vhost.url, None);
    tokio::spawn(broker.clone().supervise(stop.clone()));
    let consumer = tokio::spawn(platform::messaging::consumer::run(
        broker,
        db.pool.clone(),
        ConsumerSettings {
            queue: keys::INVENTORY_ORDER_EVENTS_QUEUE,
            consumer_tag: format!("batches-test-{}", uuid::Uuid::new_v4()),
            prefetch,
            concurrency: 1,
            linger,
        },
        handler.clone(),
        stop.clone(),
    ));
    (stop, consumer)
}

#[tokio::test]
async fn batches_are_bounded_by_the_prefetch_and_contention_spends_no_delivery() {
    testkit::init_logs();
    let db = TestDatabase::create("consumer_batches", &order_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    // Queued before the consumer starts, so it finds more than one batch's worth buffered.
    probe
        .publish(keys::ORDERS_EXCHANGE, keys::ORDER_CREATED, b"busy", None)
        .await;
    for n in 0..MESSAGES {
        let body = format!("m{n}");
        probe
            .publish(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CREATED,
                body.as_bytes(),
                None,
            )
            .await;
    }
    let handler = Recording::default();
    let (stop, consumer) = start(&vhost, &db, PREFETCH, Linger::default(), &handler);

    eventually(Duration::from_secs(30), || async {
        (handler.applied.lock().expect("applied").len() == MESSAGES + 1).then_some(())
    })
    .await;
    stop.cancel();
    consumer.await.expect("the consumer loop ends");

    let batches = handler.batches.lock().expect("batches").clone();
    assert!(
        batches
            .iter()
            .all(|size| (1..=usize::from(PREFETCH)).contains(size)),
        "{batches:?}"
    );
    assert!(
        batches.iter().any(|size| *size > 1),
        "what was buffered went together: {batches:?}"
    );
    let seen = handler.contended_seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), BUSY_TRIES as usize + 1);
    assert!(
        seen.iter().all(|count| *count == 0),
        "the broker counted no delivery for contention: {seen:?}"
    );
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0);
    assert_eq!(
        probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await,
        0,
        "every message acked, none back in the queue after the channel closed"
    );
}

#[tokio::test]
async fn a_busy_consumer_waits_for_its_batch_to_fill() {
    testkit::init_logs();
    let db = TestDatabase::create("consumer_linger", &order_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    let handler = Recording::default();
    // Far longer than the gaps below, so the test does not depend on the machine's pace.
    let linger = Linger::new(Duration::from_secs(2));
    let (stop, consumer) = start(&vhost, &db, 64, linger, &handler);
    let applied = |n: usize| {
        let handler = handler.clone();
        async move { (handler.applied.lock().expect("applied").len() == n).then_some(()) }
    };

    // The first message finds the consumer idle, and the second finds it knowing no pace
    // yet: each goes at once (were they to wait, the next, published well within the wait,
    // would join). Two batches 500 ms apart teach it a gap shorter than the wait, so the
    // third waits, and the fourth, 50 ms later, joins it.
    for (body, gap) in [
        (&b"first"[..], 500),
        (b"second", 500),
        (b"third", 50),
        (b"fourth", 0),
    ] {
        probe
            .publish(keys::ORDERS_EXCHANGE, keys::ORDER_CREATED, body, None)
            .await;
        tokio::time::sleep(Duration::from_millis(gap)).await;
    }
    eventually(Duration::from_secs(30), || applied(4)).await;
    stop.cancel();
    consumer.await.expect("the consumer loop ends");

    assert_eq!(*handler.batches.lock().expect("batches"), [1, 1, 2]);
}
