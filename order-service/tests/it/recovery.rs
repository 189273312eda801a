//! Connections come back by themselves: RabbitMQ, Redis and PostgreSQL are cut off through a
//! proxy the test controls, then let back in; no service restart.

use std::time::Duration;

use shared::keys;
use testkit::{ChaosProxy, TestVhost};

use crate::helpers::{TestApp, eventually, order_body};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn events_written_while_the_broker_is_unreachable_are_published_when_it_returns() {
    let vhost = TestVhost::create();
    let proxy = ChaosProxy::start("127.0.0.1:5672").await;
    let via_proxy = format!("amqp://guest:guest@{}/{}", proxy.addr, vhost.name);
    let app = TestApp::spawn_with(|c| c.amqp_urls = vec![via_proxy]).await;
    let probe = testkit::AmqpProbe::connect(&vhost.url).await;

    app.create_order(&order_body(1, 1001, 1)).await;
    assert_eq!(
        probe
            .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
            .await
            .len(),
        1
    );

    proxy.cut();
    eventually(WAIT, || async {
        (app.get("/readyz").await.status() == 503).then_some(())
    })
    .await;
    let during = app.create_order(&order_body(1, 1002, 1)).await;
    assert_eq!(probe.ready(keys::INVENTORY_ORDER_EVENTS_QUEUE).await, 0);

    proxy.restore();
    let published = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(
        published.len(),
        1,
        "the order taken during the outage is published"
    );
    assert_eq!(published[0].body["payload"]["order_id"], during["order_id"]);
    eventually(WAIT, || async {
        (app.get("/readyz").await.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_broker_nodes_are_walked_past_a_dead_one_and_past_one_that_is_lost() {
    let vhost = TestVhost::create();
    let (first, second) = (
        ChaosProxy::start("127.0.0.1:5672").await,
        ChaosProxy::start("127.0.0.1:5672").await,
    );
    let node = |proxy: &ChaosProxy| format!("amqp://guest:guest@{}/{}", proxy.addr, vhost.name);
    // Nothing listens on port 1: the list starts with a node that is down for good.
    let nodes = vec![
        format!("amqp://guest:guest@127.0.0.1:1/{}", vhost.name),
        node(&first),
        node(&second),
    ];
    let app = TestApp::spawn_with(|c| c.amqp_urls = nodes).await;
    let probe = testkit::AmqpProbe::connect(&vhost.url).await;

    let before = app.create_order(&order_body(1, 1001, 1)).await;
    let published = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(published.len(), 1, "published past the dead node");
    assert_eq!(published[0].body["payload"]["order_id"], before["order_id"]);

    // The walk reached the first live node; losing it leaves only the last one.
    first.cut();
    let after = app.create_order(&order_body(1, 1002, 1)).await;
    let published = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(published.len(), 1, "published through the remaining node");
    assert_eq!(published[0].body["payload"]["order_id"], after["order_id"]);
}

#[tokio::test]
async fn redis_and_postgres_outages_heal_without_a_restart() {
    let redis = ChaosProxy::start("127.0.0.1:6379").await;
    let postgres = ChaosProxy::start("127.0.0.1:5432").await;
    let db = testkit::TestDatabase::create("orders_recovery", &order_service::MIGRATOR).await;
    let redis_url = format!("redis://{}/0", redis.addr);
    let database_url = format!("postgres://postgres@{}/{}", postgres.addr, db.name);
    let app = TestApp::spawn_with(|c| {
        c.redis_url = redis_url;
        c.database_urls = vec![database_url];
    })
    .await;
    app.create_order(&order_body(1, 1001, 1)).await;

    redis.cut();
    let refused = app
        .client
        .post(app.url("/idempotency-tokens"))
        .send()
        .await
        .expect("send");
    assert_eq!(refused.status(), 503);
    redis.restore();
    eventually(WAIT, || async {
        let response = app
            .client
            .post(app.url("/idempotency-tokens"))
            .send()
            .await
            .ok()?;
        (response.status() == 201).then_some(())
    })
    .await;

    postgres.cut();
    let token = app.issue_token().await;
    let failed = app.post_order(&token, &order_body(1, 1002, 1)).await;
    assert!(failed.status().is_server_error(), "{}", failed.status());
    postgres.restore();
    // The same token works once PostgreSQL is back: the failed attempt gave it back.
    let order = eventually(WAIT, || async {
        let response = app.post_order(&token, &order_body(1, 1002, 1)).await;
        (response.status() == 202).then_some(())
    })
    .await;
    let () = order;
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(orders, 2);
}
