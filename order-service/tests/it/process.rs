//! The real binary: configuration from the environment, database creation at start, a clean
//! exit on SIGTERM, and nothing lost to a `kill -9`.

use std::collections::HashSet;
use std::process::Child;
use std::time::Duration;

use shared::keys;
use sqlx::Connection;
use testkit::{AmqpProbe, Backend, BackendDatabase, TestDatabase, TestVhost};

#[tokio::test]
async fn the_binary_creates_its_database_serves_and_exits_cleanly_on_sigterm() {
    let db = TestDatabase::create("orders_bin", &order_service::MIGRATOR).await;
    // A database name nobody created yet: the service must create it itself.
    let fresh = format!("{}_fresh", db.name);
    let port = testkit::free_port();
    let mut child = testkit::service_command_on(
        port,
        env!("CARGO_BIN_EXE_order-service"),
        &format!("{}/{fresh}", testkit::database_server()),
        testkit::NO_BROKER,
    )
    .env("RUST_LOG", "warn")
    .spawn()
    .expect("start the binary");
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    testkit::wait_until_ok(&format!("{base}/healthz")).await;
    let token = client
        .post(format!("{base}/idempotency-tokens"))
        .send()
        .await
        .expect("token");
    assert_eq!(token.status(), 201);

    testkit::signal(&child, "TERM");
    // Still running 15 s after SIGTERM fails the test.
    let exit = testkit::exit_status(&mut child, Duration::from_secs(15)).await;
    assert!(exit.success(), "exit status {exit:?}");

    let mut admin =
        sqlx::PgConnection::connect(&format!("{}/postgres", testkit::database_server()))
            .await
            .expect("connect");
    let sql = format!("DROP DATABASE IF EXISTS \"{fresh}\" WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut admin)
        .await
        .expect("drop");
}

fn start(port: u16, db: &BackendDatabase, vhost: &TestVhost, prefix: &str) -> Child {
    testkit::service_command(
        env!("CARGO_BIN_EXE_order-service"),
        db.url(),
        &vhost.url,
        prefix,
    )
    .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
    .spawn()
    .expect("start the binary")
}

testkit::on_each_backend!(orders_committed_before_a_kill_9_are_all_published_after_the_restart);

async fn orders_committed_before_a_kill_9_are_all_published_after_the_restart(backend: Backend) {
    let db = BackendDatabase::create(backend, "orders_kill", order_service::migrators()).await;
    let vhost = TestVhost::create();
    let prefix = testkit::redis_prefix();
    let port = testkit::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut first = start(port, &db, &vhost, &prefix);
    testkit::wait_until_ok(&format!("{base}/readyz")).await;

    // Orders arrive concurrently; the process dies while some are still being published.
    let place = |_| async {
        let token = testkit::poll_json(client.post(format!("{base}/idempotency-tokens"))).await?;
        let order = client
            .post(format!("{base}/orders"))
            .header("Idempotency-Key", token["token"].as_str()?)
            .json(&serde_json::json!({"user_id": 1, "product_id": 1, "quantity": 1, "amount": 1}));
        let order = testkit::poll_json(order).await?;
        order["order_id"].as_str().map(str::to_owned)
    };
    let placed: Vec<String> = futures_util::future::join_all((0..200).map(place))
        .await
        .into_iter()
        .flatten()
        .collect();
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let committed = db.count("SELECT count(*) FROM orders").await;
    assert_eq!(
        committed,
        placed.len() as i64,
        "every 202 is a committed order"
    );

    let mut second = start(port, &db, &vhost, &prefix);
    let probe = AmqpProbe::connect(&vhost.url).await;
    let mut published = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while published.len() < placed.len() && tokio::time::Instant::now() < deadline {
        let batch = probe
            .take(
                keys::INVENTORY_ORDER_EVENTS_QUEUE,
                500,
                Duration::from_millis(200),
            )
            .await;
        published.extend(
            batch
                .iter()
                .filter_map(|m| m.body["payload"]["order_id"].as_str().map(str::to_owned)),
        );
    }
    second.kill().expect("SIGKILL");
    second.wait().expect("reaped");
    let expected: HashSet<String> = placed.into_iter().collect();
    assert_eq!(
        published, expected,
        "every committed order is published at least once"
    );
}
