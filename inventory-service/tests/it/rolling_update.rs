//! What a rolling update relies on: an instance that got SIGTERM leaves the load balancer
//! (`/readyz` 503 for `SHUTDOWN_DRAIN_SECS`) while it still serves requests and consumes
//! events, then shuts down gracefully; and an instance of the previous release starts on a
//! schema the next release already migrated.

use std::time::Duration;

use serde_json::json;
use testkit::{AmqpProbe, Draining, TestDatabase, TestVhost, eventually};
use uuid::Uuid;

use crate::helpers::publish_order_created;

/// Long enough for every check below on a loaded machine; the test then waits it out.
const DRAIN_SECS: u64 = 20;

#[tokio::test]
async fn after_sigterm_readyz_is_503_while_requests_and_events_are_still_handled_then_it_exits_0() {
    let db = TestDatabase::create("inventory_drain", &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let port = testkit::free_port();
    let admin = "drain-admin-token";
    let mut command = testkit::service_command_on(
        port,
        env!("CARGO_BIN_EXE_inventory-service"),
        &db.url,
        &vhost.url,
    );
    command
        .env("ADMIN_TOKEN", admin)
        .env("SHUTDOWN_DRAIN_SECS", DRAIN_SECS.to_string());
    let mut draining = Draining::after_sigterm(command, port).await;

    let created = draining
        .client
        .post(draining.url("/products"))
        .bearer_auth(admin)
        .json(&json!({"product_id": 7, "name": "Drained", "stock": 5}))
        .send()
        .await
        .expect("a request during the drain");
    assert_eq!(created.status(), 201, "still serving while draining");

    let order_id = Uuid::now_v7();
    let probe = AmqpProbe::connect(&vhost.url).await;
    publish_order_created(&probe, order_id, &[(7, 2)]).await;
    let reservation = eventually(Duration::from_secs(10), || async {
        let response = draining
            .client
            .get(draining.url(&format!("/reservations/{order_id}")))
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
    draining.assert_still_running();

    let exit =
        testkit::exit_status(&mut draining.child, Duration::from_secs(DRAIN_SECS + 30)).await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn an_instance_of_the_previous_release_starts_on_a_schema_the_next_one_migrated() {
    testkit::assert_the_previous_release_starts_on_a_newer_schema(
        "inventory_rolling",
        &inventory_service::MIGRATOR,
    )
    .await;
}
