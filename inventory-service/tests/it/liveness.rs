//! Liveness of the order-events consumer and of direct deductions (docs/contract.md §4.4):
//! one busy product stalls only itself, a row held by a stuck transaction makes writers wait
//! a bounded time in ascending order, and consumers that die holding a valid message never
//! get it dead-lettered.

use std::time::Duration;

use platform::messaging::consumer::MESSAGES_SENT_BACK_TOTAL;
use shared::keys;
use sqlx::Connection;
use testkit::{AmqpProbe, TestVhost, eventually};
use uuid::Uuid;

use crate::helpers::{TestApp, publish_order_created};

async fn until_applied(app: &TestApp, order_id: Uuid) {
    eventually(Duration::from_secs(30), || async {
        app.reservation_state(order_id)
            .await
            .filter(|s| s == "APPLIED")
    })
    .await;
}

async fn counter(app: &TestApp, name: &str) -> f64 {
    app.metrics()
        .await
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn orders_of_a_product_locked_for_long_never_fill_the_window_of_the_others() {
    // A window of two deliveries, one channel: before kept messages were sent back, the
    // first two orders of the busy product filled it, and nothing else was delivered for as
    // long as the lock stayed busy.
    let app = TestApp::spawn_with(|c| {
        c.messaging.consumer_prefetch = 2;
        c.messaging.consumer_concurrency = 1;
    })
    .await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    // Another process holds the product's lock (and keeps renewing it).
    let held = app.lock_held_elsewhere(1).await;

    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    let busy: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    for order_id in &busy {
        publish_order_created(&probe, *order_id, &[(1, 1)]).await;
    }
    let free = Uuid::now_v7();
    publish_order_created(&probe, free, &[(2, 1)]).await;

    until_applied(&app, free).await;
    for order_id in &busy {
        assert_eq!(
            app.reservation_state(*order_id).await,
            None,
            "still waiting"
        );
    }
    assert!(counter(&app, MESSAGES_SENT_BACK_TOTAL).await >= 1.0);

    held.release().await;
    for order_id in &busy {
        until_applied(&app, *order_id).await;
    }
    assert_eq!(app.stock(1).await, 6, "each order once, copies or not");
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0, "nothing dead-lettered");
}

/// A transaction that holds product `product_id`'s row, as a writer stuck in the database
/// (paused with its transaction open) does, until it is dropped.
async fn hold_row(app: &TestApp, product_id: i64) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(&app.config.database_urls[0])
        .await
        .expect("a connection");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; SELECT 1 FROM products WHERE product_id = {product_id} FOR UPDATE"
    )))
    .execute(&mut conn)
    .await
    .expect("the row lock");
    conn
}

#[tokio::test]
async fn a_deduction_waits_for_a_held_row_holding_no_other_and_then_answers_busy() {
    let app = TestApp::spawn_with(|c| c.lock_wait = Duration::from_secs(2)).await;
    // Product 2 first: a plan that follows the table's physical order meets it first.
    app.create_product(2, 10).await;
    app.create_product(1, 10).await;
    let stuck = hold_row(&app, 1).await;

    let deduction = app.deduct_in_task("both", &[(1, 1), (2, 1)]);
    let mut observer = sqlx::PgConnection::connect(&app.config.database_urls[0])
        .await
        .expect("a connection");
    eventually(Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(app.db())
        .await
        .expect("a count");
        (waiting > 0).then_some(())
    })
    .await;
    // While the deduction waits for product 1, product 2 is free: rows are taken in
    // ascending id before any is changed.
    let mut tx = observer.begin().await.expect("a transaction");
    sqlx::query("SELECT 1 FROM products WHERE product_id = 2 FOR UPDATE NOWAIT")
        .execute(&mut *tx)
        .await
        .expect("product 2 is not locked by the waiting deduction");
    tx.rollback().await.expect("rollback");

    // Bounded: before `lock_timeout`, the request waited for as long as the row was held.
    let answer = tokio::time::timeout(Duration::from_secs(120), deduction)
        .await
        .expect("an answer while the row is still held")
        .expect("the request");
    assert_eq!(
        answer.status,
        503,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(String::from_utf8_lossy(&answer.body).contains("busy"));
    assert_eq!((app.stock(1).await, app.stock(2).await), (10, 10));

    drop(stuck);
    let again = app.deduct("both", &[(1, 1), (2, 1)]).await;
    assert_eq!(again.status(), 200);
    assert_eq!((app.stock(1).await, app.stock(2).await), (9, 9));
}

#[tokio::test]
async fn a_message_whose_consumers_died_holding_it_is_applied_not_dead_lettered() {
    // The queue and the message are there before the service: consumers of an earlier
    // generation took it and died six times, more than the broker's limit once was.
    let vhost = TestVhost::create();
    let probe = AmqpProbe::connect(&vhost.url).await;
    let order_id = Uuid::now_v7();
    publish_order_created(&probe, order_id, &[(1, 1)]).await;
    assert!(
        probe
            .return_unacked(keys::INVENTORY_ORDER_EVENTS_QUEUE, 6)
            .await
    );
    let url = vhost.url.clone();
    let app = TestApp::spawn_with(|c| c.amqp_urls = vec![url]).await;

    // Handled (rejected: its product does not exist), not dead-lettered.
    eventually(Duration::from_secs(30), || app.reservation_state(order_id)).await;
    let dlq = keys::dead_letter_queue(keys::INVENTORY_ORDER_EVENTS_QUEUE);
    assert_eq!(probe.ready(&dlq).await, 0, "nothing dead-lettered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_deductions_on_a_product_lets_its_orders_take_their_turn() {
    let app = TestApp::spawn().await;
    app.create_product(1, 1_000_000).await;
    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    // Eight clients deducting one unit at a time, without a pause, until the order is in:
    // before, their batches took the product's turn one after the other, and the batch of
    // order events, which only tried the turn, found it taken every time.
    let stop = tokio_util::sync::CancellationToken::new();
    let clients: Vec<_> = (0..64)
        .map(|client| {
            let (stop, app_url, http) = (stop.clone(), app.url("/deductions"), app.admin.clone());
            tokio::spawn(async move {
                let (mut sent, mut applied) = (0, 0);
                while !stop.is_cancelled() {
                    let body =
                        crate::helpers::deduction_body(&format!("{client}-{sent}"), &[(1, 1)]);
                    let answer = http.post(&app_url).json(&body).send().await;
                    applied += i64::from(answer.expect("POST /deductions").status() == 200);
                    sent += 1;
                }
                applied
            })
        })
        .collect();
    eventually(Duration::from_secs(30), || async {
        (app.stock(1).await < 1_000_000).then_some(())
    })
    .await;
    let order_id = Uuid::now_v7();
    publish_order_created(&probe, order_id, &[(1, 1)]).await;
    until_applied(&app, order_id).await;
    stop.cancel();
    let mut deducted = 0;
    for client in clients {
        deducted += client.await.expect("a client");
    }
    assert_eq!(app.stock(1).await, 1_000_000 - 1 - deducted);
}
