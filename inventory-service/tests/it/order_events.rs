//! Orders' events over RabbitMQ, end to end on either backend: a creation reserves its stock
//! or is refused, once however often it is delivered, and a cancellation gives the units
//! back once.

use std::time::Duration;

use serde_json::json;
use shared::keys;
use testkit::{AmqpProbe, Backend, eventually};
use uuid::Uuid;

use crate::helpers::{TestApp, publish_order_created};

testkit::on_each_backend!(order_events_reserve_and_release_stock_once);

async fn order_events_reserve_and_release_stock_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    let probe = AmqpProbe::connect(&app.config.amqp_urls[0]).await;
    let (placed, short) = (Uuid::now_v7(), Uuid::now_v7());
    publish_order_created(&probe, placed, &[(1, 4)]).await;
    publish_order_created(&probe, short, &[(1, 20)]).await;
    let within = Duration::from_secs(30);
    let state_becomes = |order_id: Uuid, wanted: &'static str| {
        let app = &app;
        eventually(within, move || async move {
            (app.reservation_state(order_id).await? == wanted).then_some(())
        })
    };
    state_becomes(placed, "APPLIED").await;
    state_becomes(short, "REJECTED").await;
    assert_eq!(app.stock(1).await, 6);

    // The same event again is recorded once; the cancellation, delivered twice, gives the
    // units back once.
    publish_order_created(&probe, placed, &[(1, 4)]).await;
    for _ in 0..2 {
        probe
            .publish_event(
                keys::ORDERS_EXCHANGE,
                keys::ORDER_CANCELLED,
                json!({"order_id": placed}),
            )
            .await;
    }
    state_becomes(placed, "RELEASED").await;
    eventually(within, || async {
        (app.stock(1).await == 10).then_some(())
    })
    .await;
    // Every message was handled (each is recorded, once, when handled): the stock read after
    // that is final. Each verdict went to the outbox in the transaction that decided it.
    eventually(within, || async {
        let handled = app
            .database
            .count("SELECT count(*) FROM processed_messages")
            .await;
        (handled == 5).then_some(())
    })
    .await;
    assert_eq!(app.stock(1).await, 10, "released once");
    assert!(app.database.count("SELECT count(*) FROM outbox").await >= 2);
}
