//! Orders' events over RabbitMQ, end to end on either backend: a creation reserves its stock
//! or is refused, once however often it is delivered, and a cancellation gives the units
//! back once.

use std::time::Duration;

use testkit::{Backend, eventually};

use crate::helpers::{TestApp, reserve_refuse_release};

testkit::on_each_backend!(order_events_reserve_and_release_stock_once);

async fn order_events_reserve_and_release_stock_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    reserve_refuse_release(&app, 1).await;
    // Every message was handled (each is recorded, once, when handled): the stock read after
    // that is final. Each verdict went to the outbox in the transaction that decided it.
    eventually(Duration::from_secs(30), || async {
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
