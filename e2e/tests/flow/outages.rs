//! Orders taken while inventory is away, and orders whose event was lost.

use std::time::Duration;

use serde_json::json;
use shared::keys;
use testkit::Backend;

use crate::helpers::{Stack, eventually, id};

testkit::on_each_backend!(
    orders_taken_while_inventory_is_down_settle_when_it_returns,
    reconciliation_publishes_again_an_order_whose_event_was_lost,
    inventory_restarting_in_the_middle_of_a_sale_loses_and_repeats_nothing,
);

async fn orders_taken_while_inventory_is_down_settle_when_it_returns(backend: Backend) {
    let mut stack = Stack::spawn_with(backend, false, |_| {}).await;
    let pending: Vec<_> = futures_util::future::join_all(
        (0..5).map(|_| stack.place(json!([{"product_id": 1001, "quantity": 1}]))),
    )
    .await;
    // order-service answers on its own.
    for order in &pending {
        assert_eq!(stack.order(&id(order)).await["status"], "PENDING");
    }
    stack.start_inventory().await;
    for order in &pending {
        // The product does not exist: settled as rejected, from the queued events.
        let settled = stack.settled(&id(order)).await;
        assert_eq!(settled["rejection_reason"], "unknown_product");
    }
}

async fn reconciliation_publishes_again_an_order_whose_event_was_lost(backend: Backend) {
    let mut stack = Stack::spawn_with(backend, false, |c| {
        c.reconcile_after = Duration::from_millis(300);
        c.reconcile_every = Duration::from_millis(200);
    })
    .await;
    let probe = stack.probe().await;
    let order = stack
        .place(json!([{"product_id": 1001, "quantity": 1}]))
        .await;
    // The event reaches the queue and is lost there (taken by someone else).
    let lost = probe
        .take(
            keys::INVENTORY_ORDER_EVENTS_QUEUE,
            1,
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(lost.len(), 1);

    stack.start_inventory().await;
    stack.create_product(1001, 5).await;
    let settled = eventually(Duration::from_secs(30), || async {
        let order = stack.order(&id(&order)).await;
        (order["status"] != "PENDING").then_some(order)
    })
    .await;
    assert_eq!(settled["status"], "CONFIRMED");
    assert_eq!(stack.stock(1001).await, 4);
}

async fn inventory_restarting_in_the_middle_of_a_sale_loses_and_repeats_nothing(backend: Backend) {
    let mut stack = Stack::spawn(backend).await;
    stack.create_product(1001, 30).await;
    let mut orders = Vec::new();
    for _ in 0..20 {
        orders.push(
            stack
                .place(json!([{"product_id": 1001, "quantity": 1}]))
                .await,
        );
    }
    // A graceful stop while events are still flowing: unfinished deliveries go back to the queue.
    stack.stop_inventory().await;
    for _ in 0..20 {
        orders.push(
            stack
                .place(json!([{"product_id": 1001, "quantity": 1}]))
                .await,
        );
    }
    stack.start_inventory().await;
    let mut confirmed = 0;
    for order in &orders {
        if stack.settled(&id(order)).await["status"] == "CONFIRMED" {
            confirmed += 1;
        }
    }
    assert_eq!(confirmed, 30);
    assert_eq!(stack.stock(1001).await, 0);
}
