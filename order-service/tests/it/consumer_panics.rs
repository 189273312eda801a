//! A handler that panics fails its own delivery only: the message is retried, then
//! dead-lettered at its failure limit (counted by its message id), and the deliveries around it are handled as usual,
//! even when they came in the same batch (the batch is handled again message by message).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use platform::messaging::broker::Broker;
use platform::messaging::consumer::{
    ConsumeError, ConsumerSettings, Handled, Handler, Message, Outcome,
};
use shared::keys;
use testkit::{AmqpProbe, TestDatabase, TestVhost, eventually};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
struct PanicsOnBoom {
    handled: Arc<AtomicU32>,
    panics: Arc<AtomicU32>,
}

impl Handler for PanicsOnBoom {
    type Work = Vec<u8>;

    fn parse(&self, message: &Message) -> Result<Vec<u8>, ConsumeError> {
        Ok(message.body.clone())
    }

    async fn apply_batch(&self, bodies: &[Vec<u8>]) -> Result<Vec<Outcome>, ConsumeError> {
        // Like a real batch handler, a bug on one message takes the whole batch down.
        if bodies.iter().any(|body| body == b"boom") {
            self.panics.fetch_add(1, Ordering::SeqCst);
            panic!("a handler bug");
        }
        self.handled
            .fetch_add(bodies.len() as u32, Ordering::SeqCst);
        Ok(bodies.iter().map(|_| Ok(Handled::Applied)).collect())
    }
}

fn message_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[tokio::test]
async fn a_panicking_handler_costs_its_own_delivery_and_nothing_else() {
    testkit::init_logs();
    let db = TestDatabase::create("consumer_panics", &order_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    let stop = CancellationToken::new();
    let broker = Broker::new(&vhost.url, None);
    tokio::spawn(broker.clone().supervise(stop.clone()));
    let handler = PanicsOnBoom::default();
    // Queued before the consumer starts, so they can arrive together in one batch.
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            b"boom",
            Some(&message_id()),
        )
        .await;
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            b"fine",
            Some(&message_id()),
        )
        .await;
    let consumer = tokio::spawn(platform::messaging::consumer::run(
        broker,
        db.pool.clone(),
        ConsumerSettings {
            queue: keys::INVENTORY_ORDER_EVENTS_QUEUE,
            consumer_tag: "panics-test".into(),
            prefetch: 8,
            concurrency: 1,
            linger: Default::default(),
        },
        handler.clone(),
        stop.clone(),
    ));

    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    eventually(Duration::from_secs(30), || async {
        (probe.ready(&dlq).await == 1).then_some(())
    })
    .await;
    assert_eq!(handler.handled.load(Ordering::SeqCst), 1);
    assert!(
        handler.panics.load(Ordering::SeqCst) >= 2,
        "retried before dead-lettering"
    );

    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            b"after",
            Some(&message_id()),
        )
        .await;
    eventually(Duration::from_secs(10), || async {
        (handler.handled.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    stop.cancel();
    consumer
        .await
        .expect("the consumer loop ends without a panic");
}
