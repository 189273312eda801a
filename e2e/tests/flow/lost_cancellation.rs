//! A cancellation whose message was lost: reconciliation sends it again, the stock comes back
//! once, and the release is recorded so the order is not asked about again (docs/contract.md §4.2).

use std::time::Duration;

use shared::keys;
use testkit::Backend;

use crate::helpers::{Stack, id};

testkit::on_each_backend!(a_lost_cancellation_is_sent_again_and_its_stock_comes_back_once);

async fn a_lost_cancellation_is_sent_again_and_its_stock_comes_back_once(backend: Backend) {
    let mut stack = Stack::spawn_with(backend, true, |c| {
        c.reconcile_after = Duration::from_millis(300);
        c.reconcile_every = Duration::from_millis(200);
    })
    .await;
    let (kept, cancelled) = stack.two_confirmed_orders().await;

    stack
        .cancel_and_lose_the_cancellation(&id(&cancelled))
        .await;
    // Sent again by reconciliation, released by inventory, and that recorded by order-service
    // (from inventory.released or the next round's answer): no more rounds for this order.
    stack.released(&id(&cancelled)).await;
    assert_eq!(stack.stock(1001).await, 8, "the 3 units back, once");
    // Invariant 1: initial stock − final stock = units of the confirmed, uncancelled orders.
    assert_eq!(10 - stack.stock(1001).await, 2);
    assert_eq!(stack.order(&id(&kept)).await["status"], "CONFIRMED");
    let sent = stack
        .order_db
        .count("SELECT count(*) FROM outbox WHERE routing_key = 'order.cancelled'")
        .await;
    assert!(
        sent >= 2,
        "the lost cancellation and at least one sent again"
    );
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(stack.probe().await.ready(&dlq).await, 0);
}
