//! The order → inventory → order saga: confirm, reject, all-or-nothing, compensation.

use serde_json::json;
use shared::keys;
use testkit::Backend;
use uuid::Uuid;

use crate::helpers::{SETTLE, Stack, eventually, id};

testkit::on_each_backend!(
    an_order_with_stock_is_confirmed_and_deducted,
    orders_without_stock_or_product_are_rejected_with_their_reason,
    a_multi_item_order_is_all_or_nothing,
    cancelling_a_confirmed_order_gives_its_stock_back_exactly_once,
    a_cancellation_seen_before_the_creation_leaves_nothing_deducted,
    the_same_creation_delivered_twice_is_applied_once,
    a_poison_order_event_is_dead_lettered_and_orders_keep_flowing,
    one_trace_id_follows_an_order_across_both_services,
);

async fn an_order_with_stock_is_confirmed_and_deducted(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let order = stack
        .place(json!([{"product_id": 1001, "quantity": 3}]))
        .await;
    let settled = stack.settled(&id(&order)).await;
    assert_eq!(settled["status"], "CONFIRMED");
    assert_eq!(stack.stock(1001).await, 7);
    let reservation = stack.reservation(&id(&order)).await.expect("reservation");
    assert_eq!(reservation["state"], "APPLIED");
}

async fn orders_without_stock_or_product_are_rejected_with_their_reason(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 2).await;
    let short = stack
        .place(json!([{"product_id": 1001, "quantity": 3}]))
        .await;
    let unknown = stack
        .place(json!([{"product_id": 4242, "quantity": 1}]))
        .await;
    let short = stack.settled(&id(&short)).await;
    let unknown = stack.settled(&id(&unknown)).await;
    assert_eq!(
        (short["status"].as_str(), short["rejection_reason"].as_str()),
        (Some("REJECTED"), Some("insufficient_stock"))
    );
    assert_eq!(
        (
            unknown["status"].as_str(),
            unknown["rejection_reason"].as_str()
        ),
        (Some("REJECTED"), Some("unknown_product"))
    );
    assert_eq!(stack.stock(1001).await, 2);
}

async fn a_multi_item_order_is_all_or_nothing(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1, 10).await;
    stack.create_product(2, 1).await;
    let order = stack
        .place(json!([{"product_id": 1, "quantity": 4}, {"product_id": 2, "quantity": 2}]))
        .await;
    assert_eq!(stack.settled(&id(&order)).await["status"], "REJECTED");
    assert_eq!((stack.stock(1).await, stack.stock(2).await), (10, 1));

    let fits = stack
        .place(json!([{"product_id": 2, "quantity": 1}, {"product_id": 1, "quantity": 4}]))
        .await;
    assert_eq!(stack.settled(&id(&fits)).await["status"], "CONFIRMED");
    assert_eq!((stack.stock(1).await, stack.stock(2).await), (6, 0));
}

async fn cancelling_a_confirmed_order_gives_its_stock_back_exactly_once(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let order = stack
        .place(json!([{"product_id": 1001, "quantity": 4}]))
        .await;
    assert_eq!(stack.settled(&id(&order)).await["status"], "CONFIRMED");
    assert_eq!(stack.stock(1001).await, 6);

    assert_eq!(stack.cancel(&id(&order)).await["status"], "CANCELLED");
    assert_eq!(stack.cancel(&id(&order)).await["status"], "CANCELLED");
    // The cancellation message delivered once more, as a broker redelivery would.
    let probe = stack.probe().await;
    // The envelope as the relay sent it; its event id is the message's id.
    let body: String = stack
        .order_db
        .scalar(
            "SELECT payload::text FROM outbox WHERE routing_key = 'order.cancelled'",
            "SELECT CAST(payload AS CHAR) FROM outbox WHERE routing_key = 'order.cancelled'",
        )
        .await;
    let event_id =
        serde_json::from_str::<serde_json::Value>(&body).expect("an envelope")["event_id"]
            .as_str()
            .expect("its event id")
            .to_owned();
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CANCELLED,
            body.as_bytes(),
            Some(&event_id),
        )
        .await;

    eventually(SETTLE, || async {
        let r = stack.reservation(&id(&order)).await?;
        (r["state"] == "RELEASED").then_some(())
    })
    .await;
    eventually(SETTLE, || async {
        (stack
            .inventory_count(
                "SELECT count(*) FROM processed_messages WHERE kind = 'order.cancelled'",
            )
            .await
            == 1)
            .then_some(())
    })
    .await;
    // Let any (wrongly) second release land before checking.
    eventually(SETTLE, || async {
        (probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await == 0).then_some(())
    })
    .await;
    assert_eq!(stack.stock(1001).await, 10, "given back once");
    assert_eq!(stack.order(&id(&order)).await["status"], "CANCELLED");
}

async fn a_cancellation_seen_before_the_creation_leaves_nothing_deducted(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let probe = stack.probe().await;
    let order_id = Uuid::now_v7();
    let event = |event_type: &str, payload: serde_json::Value| {
        json!({"event_id": Uuid::now_v7(), "version": 1, "occurred_at": chrono::Utc::now(),
               "event_type": event_type, "payload": payload})
    };
    let cancelled = event("order.cancelled", json!({"order_id": order_id}));
    let created = event(
        "order.created",
        json!({"order_id": order_id, "user_id": 1, "items": [{"product_id": 1001, "quantity": 5}], "amount": "1.00"}),
    );
    let unseen = stack
        .client
        .get(stack.inventory_url(&format!("/reservations/{order_id}")))
        .send()
        .await
        .expect("reservation");
    assert_eq!(unseen.status(), 404, "no event of the order seen yet");
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CANCELLED,
            cancelled.to_string().as_bytes(),
            None,
        )
        .await;
    eventually(SETTLE, || async {
        stack.reservation(&order_id.to_string()).await
    })
    .await;
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            created.to_string().as_bytes(),
            None,
        )
        .await;
    eventually(SETTLE, || async {
        (stack
            .inventory_count("SELECT count(*) FROM processed_messages")
            .await
            == 2)
            .then_some(())
    })
    .await;
    let reservation = stack
        .reservation(&order_id.to_string())
        .await
        .expect("tombstone");
    assert_eq!(reservation["state"], "CANCELLED");
    assert_eq!(stack.stock(1001).await, 10);
}

async fn the_same_creation_delivered_twice_is_applied_once(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let probe = stack.probe().await;
    let event_id = Uuid::now_v7().to_string();
    let created = json!({"event_id": event_id, "version": 1, "occurred_at": chrono::Utc::now(),
        "event_type": "order.created",
        "payload": {"order_id": Uuid::now_v7(), "user_id": 1, "items": [{"product_id": 1001, "quantity": 2}], "amount": "1.00"}});
    for _ in 0..3 {
        probe
            .publish(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CREATED,
                created.to_string().as_bytes(),
                Some(&event_id),
            )
            .await;
    }
    eventually(SETTLE, || async {
        (probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await == 0
            && stack
                .inventory_count("SELECT count(*) FROM processed_messages")
                .await
                == 1)
            .then_some(())
    })
    .await;
    assert_eq!(stack.stock(1001).await, 8);
    // The reservation's primary key alone would keep the stock right; the message id is what
    // keeps the copies from each answering again.
    assert_eq!(
        stack
            .inventory_count("SELECT count(*) FROM outbox WHERE routing_key LIKE 'inventory.%'")
            .await,
        1,
        "one verdict for three copies of one message"
    );
}

async fn a_poison_order_event_is_dead_lettered_and_orders_keep_flowing(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let probe = stack.probe().await;
    probe
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            b"\x00 not an event",
            None,
        )
        .await;
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    eventually(SETTLE, || async {
        (probe.ready(&dlq).await == 1).then_some(())
    })
    .await;
    let order = stack
        .place(json!([{"product_id": 1001, "quantity": 1}]))
        .await;
    assert_eq!(stack.settled(&id(&order)).await["status"], "CONFIRMED");
    assert_eq!(
        probe.ready(&dlq).await,
        1,
        "only the poison message is dead-lettered"
    );
}

async fn one_trace_id_follows_an_order_across_both_services(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    stack.create_product(1001, 10).await;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("00-{trace_id}-b7ad6b7169203331-01");
    let order = stack
        .place_with_trace(
            json!([{"product_id": 1001, "quantity": 1}]),
            Some(&traceparent),
        )
        .await;
    assert_eq!(stack.settled(&id(&order)).await["status"], "CONFIRMED");
    // inventory.reserved was written by inventory-service while handling order.created:
    // its headers continue the trace the client started at order-service.
    let traceparent: String = stack
        .inventory_db
        .scalar(
            "SELECT headers->>'traceparent' FROM outbox WHERE routing_key = 'inventory.reserved'",
            "SELECT JSON_VALUE(headers, '$.traceparent') FROM outbox \
             WHERE routing_key = 'inventory.reserved'",
        )
        .await;
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "{traceparent}"
    );
}
