//! A message that keeps failing is dead-lettered after the queue's delivery limit, instead of
//! being requeued forever (SPEC §4.2).

use std::time::Duration;

use inventory_service::lock::LockOptions;
use platform::testing::{AmqpProbe, eventually};
use serde_json::json;
use shared::ids::ProductId;
use shared::keys;
use uuid::Uuid;

use crate::helpers::TestApp;

#[tokio::test]
async fn a_message_that_keeps_failing_is_dead_lettered_after_the_delivery_limit() {
    let app = TestApp::spawn_with(|c| c.lock_wait = Duration::from_millis(100)).await;
    app.create_product(1, 10).await;
    // Another process holds the product's lock (and keeps renewing it) for the whole test:
    // every delivery of the order times out waiting for it.
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_secs(5),
        wait: Duration::from_secs(5),
        renew: true,
    });
    let held = other_process.acquire(ProductId(1)).await.expect("the lock");

    let probe = AmqpProbe::connect(&app.config.amqp_url).await;
    let order_id = Uuid::now_v7();
    let body = json!({"event_id": Uuid::now_v7(), "version": 1, "occurred_at": chrono::Utc::now(),
        "event_type": "order.created", "payload": {"order_id": order_id, "user_id": 1,
        "items": [{"product_id": 1, "quantity": 1}], "amount": "1.00"}});
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            body.to_string().as_bytes(),
            None,
        )
        .await;

    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    eventually(Duration::from_secs(60), || async {
        (probe.ready(&dlq).await == 1).then_some(())
    })
    .await;
    held.release().await;
    assert_eq!(
        probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await,
        0,
        "not requeued any more"
    );
    assert_eq!(app.stock(1).await, 10, "nothing deducted");
    let reservations: i64 = sqlx::query_scalar("SELECT count(*) FROM reservations")
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(reservations, 0);
}
