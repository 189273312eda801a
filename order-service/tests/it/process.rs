//! The real binary: configuration from the environment, database creation at start, and a
//! clean exit on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use platform::testing::{self, TestDatabase};
use sqlx::Connection;

use crate::helpers::eventually;

#[tokio::test]
async fn the_binary_creates_its_database_serves_and_exits_cleanly_on_sigterm() {
    let db = TestDatabase::create("orders_bin", &order_service::MIGRATOR).await;
    // A database name nobody created yet: the service must create it itself.
    let fresh = format!("{}_fresh", db.name);
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        probe.local_addr().expect("addr").port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_order-service"))
        .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env(
            "DATABASE_URL",
            format!("{}/{fresh}", testing::database_server()),
        )
        .env("REDIS_URL", testing::redis_url())
        .env("REDIS_KEY_PREFIX", testing::redis_prefix())
        .env("AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the binary");
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), || async {
        let response = client.get(format!("{base}/healthz")).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    let token = client
        .post(format!("{base}/idempotency-tokens"))
        .send()
        .await
        .expect("token");
    assert_eq!(token.status(), 201);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            break exit;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");

    let mut admin =
        sqlx::PgConnection::connect(&format!("{}/postgres", testing::database_server()))
            .await
            .expect("connect");
    let sql = format!("DROP DATABASE IF EXISTS \"{fresh}\" WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut admin)
        .await
        .expect("drop");
}
