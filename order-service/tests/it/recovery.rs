//! Connections come back by themselves: RabbitMQ, Redis and the database (PostgreSQL or
//! MariaDB) are cut off through a proxy the test controls, then let back in; no service
//! restart.

use std::time::Duration;

use shared::keys;
use testkit::{Backend, BackendDatabase, ChaosProxy, TestVhost};

use crate::helpers::{TestApp, eventually, order_body};

const WAIT: Duration = Duration::from_secs(20);

testkit::on_each_backend!(redis_and_database_outages_heal_without_a_restart);

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

async fn redis_and_database_outages_heal_without_a_restart(backend: Backend) {
    let redis = ChaosProxy::start("127.0.0.1:6379").await;
    let server = match backend {
        Backend::Postgres => "127.0.0.1:5432",
        Backend::MySql => "127.0.0.1:3306",
    };
    let database = ChaosProxy::start(server).await;
    let db = BackendDatabase::create(backend, "orders_recovery", order_service::migrators()).await;
    let redis_url = format!("redis://{}/0", redis.addr);
    // The test's database, reached through the proxy.
    let database_url = db.url().replacen(server, &database.addr.to_string(), 1);
    assert_ne!(database_url, db.url(), "the URL names {server}");
    let app = TestApp::spawn_on(backend, |c| {
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

    database.cut();
    let token = app.issue_token().await;
    let failed = app.post_order(&token, &order_body(1, 1002, 1)).await;
    assert!(failed.status().is_server_error(), "{}", failed.status());
    database.restore();
    // The same token works once the database is back: the failed attempt gave it back.
    let order = eventually(WAIT, || async {
        let response = app.post_order(&token, &order_body(1, 1002, 1)).await;
        (response.status() == 202).then_some(())
    })
    .await;
    let () = order;
    assert_eq!(db.count("SELECT count(*) FROM orders").await, 2);
}
