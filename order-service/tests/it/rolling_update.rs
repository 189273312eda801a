//! What a rolling update relies on: an instance that got SIGTERM leaves the load balancer
//! (`/readyz` 503 for `SHUTDOWN_DRAIN_SECS`) while it still serves, and an instance of the
//! previous release starts on a schema the next release already migrated.

use std::time::Duration;

use testkit::{Draining, TestDatabase, TestVhost};

#[tokio::test]
async fn after_sigterm_readyz_is_503_while_orders_are_still_taken_and_a_second_signal_ends_the_drain()
 {
    let db = TestDatabase::create("orders_drain", &order_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let port = testkit::free_port();
    let mut command = testkit::service_command_on(
        port,
        env!("CARGO_BIN_EXE_order-service"),
        &db.url,
        &vhost.url,
    );
    // Far longer than the test: only the second signal can end it in time.
    command.env("SHUTDOWN_DRAIN_SECS", "300");
    let mut draining = Draining::after_sigterm(command, port).await;
    let token = draining
        .client
        .post(draining.url("/idempotency-tokens"))
        .send()
        .await
        .expect("a request during the drain");
    assert_eq!(token.status(), 201, "still serving while draining");
    draining.assert_still_running();

    testkit::signal(&draining.child, "TERM");
    let exit = testkit::exit_status(&mut draining.child, Duration::from_secs(30)).await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn an_instance_of_the_previous_release_starts_on_a_schema_the_next_one_migrated() {
    testkit::assert_the_previous_release_starts_on_a_newer_schema(
        "orders_rolling",
        &order_service::MIGRATOR,
    )
    .await;
}
