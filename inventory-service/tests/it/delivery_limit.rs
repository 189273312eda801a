//! Contention is not failure (docs/contract.md §4.2, §4.3 invariant 5): a product lock held elsewhere
//! for far longer than the failure limit's worth of lock waits never dead-letters a valid
//! order; a message that truly keeps failing is still dead-lettered after its failure limit
//! (counted by the service) instead of being requeued forever.

use std::time::Duration;

use shared::keys;
use testkit::{AmqpProbe, eventually};
use uuid::Uuid;

use crate::helpers::{TestApp, publish_order_created, refuse_reservations_of};

/// Deliveries put back because the product's lock was held elsewhere, so far.
async fn contended(app: &TestApp) -> f64 {
    app.metrics()
        .await
        .lines()
        .find(|l| l.starts_with(r#"messages_consumed_total{result="contended"}"#))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_lock_held_elsewhere_for_long_delays_a_valid_order_but_never_dead_letters_it() {
    let app = TestApp::spawn_with(|c| c.lock_wait = Duration::from_millis(100)).await;
    app.create_product(1, 10).await;
    // Another process holds the product's lock (and keeps renewing it).
    let held = app.lock_held_elsewhere(1).await;
    let before = contended(&app).await;

    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    let order_id = Uuid::now_v7();
    publish_order_created(&probe, order_id, &[(1, 1)]).await;

    // Held through many more tries than the delivery limit (each try would have been a lock
    // wait and a requeue before): counted, not timed.
    let tries = 4.0 * f64::from(platform::messaging::consumer::FAILURE_LIMIT);
    eventually(Duration::from_secs(60), || async {
        (contended(&app).await - before >= tries).then_some(())
    })
    .await;
    assert_eq!(app.reservation_state(order_id).await, None, "still waiting");
    held.release().await;

    eventually(Duration::from_secs(30), || async {
        app.reservation_state(order_id)
            .await
            .filter(|s| s == "APPLIED")
    })
    .await;
    assert_eq!(app.stock(1).await, 9);
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0, "nothing dead-lettered");
}

#[tokio::test]
async fn a_message_that_keeps_failing_is_dead_lettered_after_its_failure_limit() {
    let app = TestApp::spawn().await;
    app.create_product(1, 10).await;
    let order_id = Uuid::now_v7();
    // A database that refuses this one order's reservation every time: a real failure.
    refuse_reservations_of(&app.database, order_id).await;

    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    publish_order_created(&probe, order_id, &[(1, 1)]).await;
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    eventually(Duration::from_secs(60), || async {
        (probe.ready(&dlq).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await,
        0,
        "not requeued any more"
    );
    assert_eq!(app.stock(1).await, 10, "nothing deducted");
    assert_eq!(app.reservation_state(order_id).await, None);
    let failures: Vec<i32> = sqlx::query_scalar("SELECT failures FROM message_failures")
        .fetch_all(app.db())
        .await
        .expect("the counts");
    assert_eq!(
        failures,
        [platform::messaging::consumer::FAILURE_LIMIT],
        "counted by the service, each failure once"
    );
}
