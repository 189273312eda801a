//! docs/contract.md §4.2 from order-service's side, against a real RabbitMQ vhost per test: the relay,
//! the consumer of inventory's events, cancel, dead letters and the admin outbox.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use shared::keys;
use testkit::Backend;
use uuid::Uuid;

use crate::helpers::{TestApp, assert_problem, eventually, order_body};

testkit::on_each_backend!(
    a_new_order_is_published_persistent_with_its_id_and_trace,
    a_reservation_confirms_the_order_and_its_duplicate_changes_nothing,
    a_rejection_settles_the_order_with_its_reason,
    a_poison_message_is_dead_lettered_and_the_flow_goes_on,
    cancelling_emits_order_cancelled_once_and_repeats_answer_the_same,
    a_reservation_for_a_cancelled_order_leaves_it_cancelled_and_asks_for_a_release,
);

const WAIT: Duration = Duration::from_secs(10);

/// Publishes an inventory event as inventory-service would (its type is its routing key).
async fn send(probe: &testkit::AmqpProbe, event_type: &str, payload: Value) {
    probe
        .publish_event(keys::INVENTORY_EXCHANGE, event_type, payload)
        .await;
}

/// Publishes `envelope` (an `inventory.reserved`) under its `event_id`, once more.
async fn publish_reserved(probe: &testkit::AmqpProbe, (event_id, envelope): &(String, Value)) {
    probe
        .publish(
            keys::INVENTORY_EXCHANGE,
            "inventory.reserved",
            envelope.to_string().as_bytes(),
            Some(event_id),
        )
        .await;
}

async fn a_new_order_is_published_persistent_with_its_id_and_trace(backend: Backend) {
    let app = TestApp::spawn_with_broker_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let probe = app.probe().await;
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    let message = messages.first().expect("order.created arrives");
    assert_eq!(message.routing_key, "order.created");
    assert!(message.persistent);
    assert_eq!(message.content_type.as_deref(), Some("application/json"));
    assert_eq!(message.body["payload"]["order_id"], order["order_id"]);
    assert_eq!(
        message.message_id.as_deref(),
        message.body["event_id"].as_str()
    );
    assert!(
        message
            .traceparent
            .as_deref()
            .is_some_and(|t| t.starts_with("00-"))
    );
    let status: String = eventually(WAIT, || async {
        let read = "SELECT status FROM outbox";
        let status: String = app.database.scalar(read, read).await;
        (status == "sent").then_some(status)
    })
    .await;
    assert_eq!(status, "sent");
}

async fn a_reservation_confirms_the_order_and_its_duplicate_changes_nothing(backend: Backend) {
    let app = TestApp::spawn_with_broker_on(backend, |c| {
        c.messaging.consumer_concurrency = 1;
        c.messaging.consumer_prefetch = 1;
    })
    .await;
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let order_id = order["order_id"].as_str().expect("id");
    let probe = app.probe().await;
    let reserved = testkit::event_envelope(
        "inventory.reserved",
        json!({"order_id": order_id, "items": order["items"]}),
    );
    for _ in 0..2 {
        publish_reserved(&probe, &reserved).await;
    }
    app.wait_for_status(order_id, "CONFIRMED").await;
    eventually(WAIT, || async {
        (probe.ready(keys::ORDER_INVENTORY_EVENTS_QUEUE).await == 0).then_some(())
    })
    .await;
    assert_eq!(app.count("processed_messages").await, 1);

    // Once the order is cancelled, a reservation it had not seen would ask inventory for a
    // release; the same reservation seen before must not.
    assert_eq!(app.cancel(order_id).await.status(), 200);
    publish_reserved(&probe, &reserved).await;
    // One delivery at a time, in order: once a later message is recorded, the duplicate was
    // handled.
    send(
        &probe,
        "inventory.rejected",
        json!({"order_id": Uuid::now_v7(), "reason": "unknown_product"}),
    )
    .await;
    eventually(WAIT, || async {
        (app.count("processed_messages").await == 2).then_some(())
    })
    .await;
    let cancellations = app
        .database
        .count("SELECT count(*) FROM outbox WHERE routing_key = 'order.cancelled'")
        .await;
    assert_eq!(cancellations, 1, "the duplicate asked for a second release");
    assert_eq!(
        probe
            .ready(&keys::dead_letter_queue(keys::ORDER_INVENTORY_EVENTS_QUEUE))
            .await,
        0
    );
}

async fn a_rejection_settles_the_order_with_its_reason(backend: Backend) {
    let app = TestApp::spawn_with_broker_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let order_id = order["order_id"].as_str().expect("id");
    let probe = app.probe().await;
    send(
        &probe,
        "inventory.rejected",
        json!({"order_id": order_id, "reason": "insufficient_stock"}),
    )
    .await;
    app.wait_for_status(order_id, "REJECTED").await;
    let order: Value = app
        .get(&format!("/orders/{order_id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(order["rejection_reason"], "insufficient_stock");
    // A rejected order cannot be cancelled.
    assert_problem(app.cancel(order_id).await, 409, "order-not-cancellable").await;
}

async fn a_poison_message_is_dead_lettered_and_the_flow_goes_on(backend: Backend) {
    let app = TestApp::spawn_with_broker_on(backend, |_| {}).await;
    let probe = app.probe().await;
    probe
        .publish(
            keys::INVENTORY_EXCHANGE,
            "inventory.reserved",
            b"{not json",
            None,
        )
        .await;
    let dlq = keys::dead_letter_queue(keys::ORDER_INVENTORY_EVENTS_QUEUE);
    eventually(WAIT, || async {
        (probe.ready(&dlq).await == 1).then_some(())
    })
    .await;

    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let order_id = order["order_id"].as_str().expect("id");
    send(
        &probe,
        "inventory.reserved",
        json!({"order_id": order_id, "items": []}),
    )
    .await;
    app.wait_for_status(order_id, "CONFIRMED").await;
    assert_eq!(probe.ready(&dlq).await, 1);
}

async fn cancelling_emits_order_cancelled_once_and_repeats_answer_the_same(backend: Backend) {
    let app = TestApp::spawn_with_broker_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let order_id = order["order_id"].as_str().expect("id");
    let first = app.cancel(order_id).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.expect("json");
    assert_eq!(first["status"], "CANCELLED");
    let again: Value = app.cancel(order_id).await.json().await.expect("json");
    assert_eq!(again, first);

    let probe = app.probe().await;
    let messages = probe
        .take(
            keys::INVENTORY_ORDER_EVENTS_QUEUE,
            3,
            Duration::from_secs(3),
        )
        .await;
    let kinds: Vec<_> = messages.iter().map(|m| m.routing_key.as_str()).collect();
    assert_eq!(kinds, ["order.created", "order.cancelled"]);
    assert_problem(
        app.cancel(&Uuid::new_v4().to_string()).await,
        404,
        "not-found",
    )
    .await;
}

async fn a_reservation_for_a_cancelled_order_leaves_it_cancelled_and_asks_for_a_release(
    backend: Backend,
) {
    let app = TestApp::spawn_with_broker_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 2)).await;
    let order_id = order["order_id"].as_str().expect("id");
    assert_eq!(app.cancel(order_id).await.status(), 200);
    let probe = app.probe().await;
    send(
        &probe,
        "inventory.reserved",
        json!({"order_id": order_id, "items": order["items"]}),
    )
    .await;

    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 3, WAIT)
        .await;
    let cancels = messages
        .iter()
        .filter(|m| m.routing_key == "order.cancelled")
        .count();
    assert_eq!(cancels, 2, "the cancel and the release request");
    assert_eq!(app.order_status(order_id).await, "CANCELLED");
}

#[tokio::test]
async fn several_relays_publish_each_outbox_row_exactly_once() {
    // Rows written by no relay's process: the sweep may take them at once.
    let app = TestApp::spawn_with_broker(|c| c.messaging.relay.sweep_after = Duration::ZERO).await;
    let rows: i32 = 300;
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload) \
         SELECT gen_random_uuid(), 'orders.events', 'order.cancelled', \
                jsonb_build_object('n', n) FROM generate_series(1, $1) AS n",
    )
    .bind(rows)
    .execute(&app.db().pool)
    .await
    .expect("seed");
    // The app runs one relay; two more compete for the same rows.
    let broker =
        platform::messaging::broker::Broker::new(&app.vhost.as_ref().expect("vhost").url, None);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(broker.clone().supervise(stop.clone()));
    for _ in 0..2 {
        let settings = platform::messaging::relay::RelaySettings {
            batch_size: 7,
            sweep_after: Duration::ZERO,
            ..Default::default()
        };
        // Rows they did not write reach them by polling, as rows of other instances do.
        tokio::spawn(platform::messaging::relay::run(
            app.db().pool.clone(),
            broker.clone(),
            settings,
            platform::messaging::outbox::OutboxSignal::default(),
            stop.clone(),
        ));
    }
    let probe = app.probe().await;
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, rows as usize, WAIT)
        .await;
    stop.cancel();
    let ids: HashSet<_> = messages
        .iter()
        .filter_map(|m| m.message_id.clone())
        .collect();
    assert_eq!(messages.len(), rows as usize);
    assert_eq!(ids.len(), rows as usize, "no row published twice");
    let unsent: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE status <> 'sent'")
        .fetch_one(&app.db().pool)
        .await
        .expect("count");
    assert_eq!(unsent, 0);
    assert_eq!(probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);
}

#[tokio::test]
async fn an_unroutable_row_dies_after_its_attempts_and_an_operator_can_send_it_again() {
    let app = TestApp::spawn_with_broker(|c| {
        c.messaging.relay.max_attempts = 2;
        c.messaging.relay.sweep_after = Duration::ZERO;
        c.messaging.relay.base_backoff = Duration::from_millis(10);
        c.messaging.relay.max_backoff = Duration::from_millis(20);
    })
    .await;
    // No queue is bound to `inventory.events` with this key: the publish comes back.
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload) \
         VALUES (gen_random_uuid(), 'inventory.events', 'nowhere.at.all', '{}')",
    )
    .execute(&app.db().pool)
    .await
    .expect("seed");
    let admin = |path: &str| {
        app.client
            .get(app.url(path))
            .bearer_auth("test-admin-token")
    };
    let dead: Value = eventually(WAIT, || async {
        let page = testkit::poll_json(admin("/admin/outbox?status=dead")).await?;
        (!page["items"].as_array()?.is_empty()).then_some(page)
    })
    .await;
    let row = &dead["items"][0];
    assert_eq!(row["attempts"], 2);
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("unroutable"))
    );
    let unauthorized = app
        .client
        .get(app.url("/admin/outbox"))
        .send()
        .await
        .expect("send");
    assert_problem(unauthorized, 401, "unauthorized").await;

    // The operator fixes the cause, then asks for one more send.
    sqlx::query("UPDATE outbox SET routing_key = 'order.cancelled', exchange = 'orders.events'")
        .execute(&app.db().pool)
        .await
        .expect("fix");
    let id = row["id"].as_i64().expect("id");
    let retried = app
        .client
        .post(app.url(&format!("/admin/outbox/{id}/retry")))
        .bearer_auth("test-admin-token")
        .send()
        .await
        .expect("retry");
    assert_eq!(retried.status(), 200);
    let probe = app.probe().await;
    assert_eq!(
        probe
            .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
            .await
            .len(),
        1
    );
    let missing = app
        .client
        .post(app.url("/admin/outbox/999999/retry"))
        .bearer_auth("test-admin-token")
        .send()
        .await
        .expect("retry");
    assert_problem(missing, 404, "not-found").await;
}

#[tokio::test]
async fn a_relay_with_a_pace_waits_a_moment_and_sends_what_came_meanwhile_in_one_batch() {
    // The app's own relay looks only at start, so the rows below are this test's relay's.
    let app = TestApp::spawn_with_broker(|c| {
        c.messaging.relay.idle_poll = Duration::from_secs(3600);
    })
    .await;
    let broker =
        platform::messaging::broker::Broker::new(&app.vhost.as_ref().expect("vhost").url, None);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(broker.clone().supervise(stop.clone()));
    let signal = platform::messaging::outbox::OutboxSignal::default();
    let settings = platform::messaging::relay::RelaySettings {
        idle_poll: Duration::from_secs(3600),
        // The rows are inserted here, not handed over: the sweep takes them, woken.
        sweep_after: Duration::ZERO,
        // Far longer than the gap below, so the test does not depend on the machine's pace.
        linger: platform::messaging::linger::Linger::new(Duration::from_secs(2)),
        ..Default::default()
    };
    tokio::spawn(platform::messaging::relay::run(
        app.db().pool.clone(),
        broker,
        settings,
        signal.clone(),
        stop.clone(),
    ));
    let commit = |n: i32| {
        let (pool, signal) = (app.db().pool.clone(), signal.clone());
        async move {
            sqlx::query(
                "INSERT INTO outbox (event_id, exchange, routing_key, payload) \
                 VALUES (gen_random_uuid(), 'orders.events', 'order.cancelled', \
                         jsonb_build_object('n', $1::int))",
            )
            .bind(n)
            .execute(&pool)
            .await
            .expect("an outbox row");
            signal.wake();
        }
    };
    let sent_at = |n: i32| {
        let pool = app.db().pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<chrono::DateTime<chrono::Utc>>>(
                "SELECT sent_at FROM outbox WHERE payload->>'n' = $1::text",
            )
            .bind(n.to_string())
            .fetch_one(&pool)
            .await
            .expect("the row")
        }
    };

    // The first two commits find the relay knowing no pace: each goes at once. Two rounds
    // 300 ms apart teach it a gap shorter than the wait, so the third waits, and the fourth,
    // 50 ms later, joins it.
    commit(1).await;
    let first = eventually(WAIT, || sent_at(1)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    commit(2).await;
    let second = eventually(WAIT, || sent_at(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    commit(3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    commit(4).await;
    let third = eventually(WAIT, || sent_at(3)).await;
    let fourth = eventually(WAIT, || sent_at(4)).await;
    stop.cancel();

    // `sent_at` is the relay transaction's start: one value, one batch.
    assert_eq!(
        third, fourth,
        "rows committed within the wait went together"
    );
    assert_ne!(first, second, "a relay with no pace yet went at once");
    assert_ne!(second, third);
}

#[tokio::test]
async fn the_relay_publishes_the_rows_its_process_committed_without_a_sweep() {
    // The sweep looks once, at start: whatever is published afterwards was handed over.
    let app = TestApp::spawn_with_broker(|c| {
        c.messaging.relay.idle_poll = Duration::from_secs(3600);
        c.messaging.relay.sweep_after = Duration::from_secs(3600);
    })
    .await;
    let mut orders = Vec::new();
    for user in 1..=3 {
        orders.push(app.create_order(&order_body(user, 1001, 1)).await);
    }
    let probe = app.probe().await;
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 3, WAIT)
        .await;
    let published: HashSet<_> = messages
        .iter()
        .map(|m| m.body["payload"]["order_id"].clone())
        .collect();
    let created: HashSet<_> = orders.iter().map(|o| o["order_id"].clone()).collect();
    assert_eq!(published, created);
    // Marked sent once the broker confirmed them, and published once each.
    eventually(WAIT, || async {
        let unsent: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE status <> 'sent'")
            .fetch_one(&app.db().pool)
            .await
            .ok()?;
        (unsent == 0).then_some(())
    })
    .await;
    assert_eq!(probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);
}

#[tokio::test]
async fn a_row_nobody_handed_over_waits_for_the_sweep_age_then_goes_out_once() {
    let sweep_after = Duration::from_secs(1);
    let app = TestApp::spawn_with_broker(|c| {
        c.messaging.relay.idle_poll = Duration::from_millis(50);
        c.messaging.relay.sweep_after = sweep_after;
    })
    .await;
    // As a process that died after its commit would leave it: in the table, in no relay's hands.
    sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload) \
         VALUES (gen_random_uuid(), 'orders.events', 'order.cancelled', '{}')",
    )
    .execute(&app.db().pool)
    .await
    .expect("seed");
    let probe = app.probe().await;
    let messages = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(messages.len(), 1);
    // The mark follows the broker's confirm, so the message can be read before its row says sent.
    let (created_at, sent_at): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        eventually(WAIT, || async {
            sqlx::query_as("SELECT created_at, sent_at FROM outbox WHERE status = 'sent'")
                .fetch_optional(&app.db().pool)
                .await
                .ok()?
        })
        .await;
    // Claimed by the sweep, whose transaction began once the row was old enough.
    assert!(
        (sent_at - created_at).to_std().expect("after") >= sweep_after,
        "swept {:?} after its commit",
        sent_at - created_at
    );
    assert_eq!(probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);
}
