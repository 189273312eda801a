//! What a rolling update relies on: an instance that got SIGTERM leaves the load balancer
//! (`/readyz` 503 for `SHUTDOWN_DRAIN_SECS`) while it still serves requests and consumes
//! events, then shuts down gracefully; and an instance of the previous release starts on a
//! schema the next release already migrated.

use std::time::Duration;

use serde_json::json;
use shared::keys;
use testkit::{AmqpProbe, KilledOnDrop, TestDatabase, TestVhost, eventually};
use uuid::Uuid;

/// Long enough for every check below on a loaded machine; the test then waits it out.
const DRAIN_SECS: u64 = 20;

#[tokio::test]
async fn after_sigterm_readyz_is_503_while_requests_and_events_are_still_handled_then_it_exits_0() {
    let db = TestDatabase::create("inventory_drain", &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let port = testkit::free_port();
    let admin = "drain-admin-token";
    let mut child = KilledOnDrop(
        testkit::service_command(
            env!("CARGO_BIN_EXE_inventory-service"),
            &db.url,
            &vhost.url,
            &testkit::redis_prefix(),
        )
        .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("ADMIN_TOKEN", admin)
        .env("SHUTDOWN_DRAIN_SECS", DRAIN_SECS.to_string())
        .spawn()
        .expect("start the binary"),
    );
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let readyz = || async {
        let response = client.get(format!("{base}/readyz")).send().await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.json::<serde_json::Value>().await.ok()?))
    };
    eventually(Duration::from_secs(30), || async {
        (readyz().await?.0 == 200).then_some(())
    })
    .await;

    testkit::signal(&child, "TERM");
    let problem = eventually(Duration::from_secs(10), || async {
        let (status, body) = readyz().await?;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(problem["type"], "/problems/not-ready");
    assert_eq!(problem["detail"], "shutting down");

    let created = client
        .post(format!("{base}/products"))
        .bearer_auth(admin)
        .json(&json!({"product_id": 7, "name": "Drained", "stock": 5}))
        .send()
        .await
        .expect("a request during the drain");
    assert_eq!(created.status(), 201, "still serving while draining");

    let (order_id, event_id) = (Uuid::now_v7(), Uuid::now_v7().to_string());
    let event = json!({"event_id": event_id, "version": 1, "occurred_at": chrono::Utc::now(),
        "event_type": "order.created", "payload": {"order_id": order_id, "user_id": 1,
        "items": [{"product_id": 7, "quantity": 2}], "amount": "2.00"}});
    AmqpProbe::connect(&vhost.url)
        .await
        .publish(
            keys::ORDERS_EXCHANGE,
            keys::ORDER_CREATED,
            event.to_string().as_bytes(),
            Some(&event_id),
        )
        .await;
    let reservation = eventually(Duration::from_secs(10), || async {
        let response = client
            .get(format!("{base}/reservations/{order_id}"))
            .send()
            .await
            .ok()?;
        response.status().is_success().then_some(())?;
        response.json::<serde_json::Value>().await.ok()
    })
    .await;
    assert_eq!(
        reservation["state"], "APPLIED",
        "still consuming while draining"
    );
    assert!(child.try_wait().expect("wait").is_none(), "still running");

    let exit = testkit::exit_status(&mut child, Duration::from_secs(DRAIN_SECS + 30)).await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn an_instance_of_the_previous_release_starts_on_a_schema_the_next_one_migrated() {
    let db = TestDatabase::create("inventory_rolling", &inventory_service::MIGRATOR).await;
    testkit::record_a_newer_migration(&db.pool).await;
    platform::storage::postgres::connect_and_migrate(
        std::slice::from_ref(&db.url),
        &platform::storage::postgres::PoolSettings::default(),
        &inventory_service::MIGRATOR,
    )
    .await
    .expect("the previous release starts");
}
