//! What a rolling update relies on: an instance that got SIGTERM leaves the load balancer
//! (`/readyz` 503 for `SHUTDOWN_DRAIN_SECS`) while it still serves, and an instance of the
//! previous release starts on a schema the next release already migrated.

use std::time::Duration;

use testkit::{KilledOnDrop, TestDatabase, TestVhost, eventually};

#[tokio::test]
async fn after_sigterm_readyz_is_503_while_orders_are_still_taken_and_a_second_signal_ends_the_drain()
 {
    let db = TestDatabase::create("orders_drain", &order_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let port = testkit::free_port();
    let mut child = KilledOnDrop(
        testkit::service_command(
            env!("CARGO_BIN_EXE_order-service"),
            &db.url,
            &vhost.url,
            &testkit::redis_prefix(),
        )
        .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
        // Far longer than the test: only the second signal can end it in time.
        .env("SHUTDOWN_DRAIN_SECS", "300")
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
    let token = client
        .post(format!("{base}/idempotency-tokens"))
        .send()
        .await
        .expect("a request during the drain");
    assert_eq!(token.status(), 201, "still serving while draining");
    assert!(child.try_wait().expect("wait").is_none(), "still running");

    testkit::signal(&child, "TERM");
    let exit = testkit::exit_status(&mut child, Duration::from_secs(30)).await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn an_instance_of_the_previous_release_starts_on_a_schema_the_next_one_migrated() {
    let db = TestDatabase::create("orders_rolling", &order_service::MIGRATOR).await;
    testkit::record_a_newer_migration(&db.pool).await;
    platform::storage::postgres::connect_and_migrate(
        std::slice::from_ref(&db.url),
        &platform::storage::postgres::PoolSettings::default(),
        &order_service::MIGRATOR,
    )
    .await
    .expect("the previous release starts");
}
