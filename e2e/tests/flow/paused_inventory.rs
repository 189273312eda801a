//! A cancellation racing its creation: inventory-service is paused (`SIGSTOP`) while an order
//! is placed and cancelled, so both events wait for it in its queue and its consumer takes
//! them together, in one batch, when it resumes. Counted, not timed: every round ends with the stock back,
//! and inventory's own counters show that every message was handled once, the first time —
//! no nack and retry backoff, no redelivery, no dead letter.

use std::time::Duration;

use serde_json::json;
use shared::keys;
use testkit::Backend;

use crate::helpers::{SETTLE, Stack, eventually, id};
use crate::inventory_process::InventoryProcess;

testkit::on_each_backend!(
    a_cancellation_racing_its_creation_is_released_without_a_retry_or_redelivery
);

const ROUNDS: usize = 200;
const STOCK: i64 = 1_000;

/// Outbox rows of the order whose status `condition` keeps.
async fn rows_of(stack: &Stack, order_id: &str, condition: &str) -> i64 {
    let rows = format!("SELECT count(*) FROM outbox WHERE {condition}");
    stack
        .order_db
        .scalar(
            &format!("{rows} AND payload->'payload'->>'order_id' = '{order_id}'"),
            &format!("{rows} AND JSON_VALUE(payload, '$.payload.order_id') = '{order_id}'"),
        )
        .await
}

async fn a_cancellation_racing_its_creation_is_released_without_a_retry_or_redelivery(
    backend: Backend,
) {
    let stack = Stack::spawn_with(backend, false, |_| {}).await;
    let inventory = InventoryProcess::start(stack.inventory_db.url(), &stack.vhost).await;
    inventory.create_product(1001, STOCK).await;

    let (mut released, mut tombstoned) = (0, 0);
    for _ in 0..ROUNDS {
        inventory.pause();
        let order = id(&stack
            .place(json!([{"product_id": 1001, "quantity": 3}]))
            .await);
        assert_eq!(stack.cancel(&order).await["status"], "CANCELLED");
        // Both events are in inventory's queue (the broker confirmed them) before it resumes.
        eventually(SETTLE, || async {
            let sent = rows_of(&stack, &order, "status = 'sent'").await;
            let unsent = rows_of(&stack, &order, "status <> 'sent'").await;
            (sent == 2 && unsent == 0).then_some(())
        })
        .await;
        inventory.resume();
        let state = eventually(SETTLE, || async {
            let state = inventory.reservation(&order).await?["state"].clone();
            let settled = state == "RELEASED" || state == "CANCELLED";
            (settled && inventory.stock(1001).await == STOCK).then_some(state)
        })
        .await;
        if state == "RELEASED" {
            released += 1;
        } else {
            tombstoned += 1;
        }
    }
    // The consumer takes both events in one batch and handles them in arrival order; the
    // creation was published first, so every round reserved, then released. (The
    // cancellation-first case, a tombstone, is covered where the order of arrival can be
    // chosen: inventory's batch tests, and the saga's cancellation seen before its creation.)
    assert_eq!(
        (released, tombstoned),
        (ROUNDS, 0),
        "released {released}, tombstoned {tombstoned}"
    );

    // Quiet: every event either side wrote was published and consumed by the other.
    let (orders, inventory_db) = (&stack.order_db, &stack.inventory_db);
    let sent_to_inventory = eventually(Duration::from_secs(30), || async {
        let unsent = "SELECT count(*) FROM outbox WHERE status <> 'sent'";
        let unsent = orders.count(unsent).await + inventory_db.count(unsent).await;
        let to_inventory = orders.count("SELECT count(*) FROM outbox").await;
        let consumed_by_orders = orders
            .count("SELECT count(*) FROM processed_messages")
            .await;
        let from_inventory = inventory_db.count("SELECT count(*) FROM outbox").await;
        let handled = inventory
            .counter("messages_consumed_total", "result=\"applied\"")
            .await;
        (unsent == 0 && consumed_by_orders == from_inventory && handled == to_inventory as f64)
            .then_some(to_inventory)
    })
    .await;
    assert!(sent_to_inventory >= 2 * ROUNDS as i64);
    for result in ["retried", "duplicate", "dead_lettered"] {
        assert_eq!(
            inventory
                .counter("messages_consumed_total", &format!("result=\"{result}\""))
                .await,
            0.0,
            "deliveries that were {result} (applied: {sent_to_inventory}, one per message)"
        );
    }
    let probe = stack.probe().await;
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0);
    // Invariant 1: no order holds a deduction, so all the stock is there.
    assert_eq!(inventory.stock(1001).await, STOCK);
    assert_eq!(
        inventory_db
            .count("SELECT count(*) FROM reservations WHERE state = 'APPLIED'")
            .await,
        0
    );
}
