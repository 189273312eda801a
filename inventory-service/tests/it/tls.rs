//! TLS to every backing service, against real TLS endpoints this test starts: a PostgreSQL
//! cluster that takes TLS connections only, a Redis on a TLS port only, and a TLS front (rustls)
//! before RabbitMQ. The service binary verifies each against the private CA it is given, and
//! refuses a server its CA did not sign.

use std::time::Duration;

use sqlx::Connection;
use testkit::captured_log::CapturedLog;
use testkit::redis::PrivateRedis;
use testkit::tls::{PrivatePostgres, TestCa, TlsFront};
use testkit::{KilledOnDrop, TestDatabase, TestVhost, eventually};

const BINARY: &str = env!("CARGO_BIN_EXE_inventory-service");
const NO_BROKER: &str = "amqp://guest:guest@127.0.0.1:1/%2f";

/// The inventory-service binary, its log (at `warn`) collected as it runs.
struct Service {
    base: String,
    log: CapturedLog,
    _child: KilledOnDrop,
}

impl Service {
    fn start(database_url: &str, amqp_url: &str, env: &[(&str, String)]) -> Self {
        let port = testkit::free_port();
        let mut command =
            testkit::service_command(BINARY, database_url, amqp_url, &testkit::redis_prefix());
        command
            .env("HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn");
        for (name, value) in env {
            command.env(name, value);
        }
        let (child, log) = CapturedLog::spawn(&mut command);
        Self {
            base: format!("http://127.0.0.1:{port}"),
            log,
            _child: child,
        }
    }

    /// `/readyz` once the process serves: status and body.
    async fn readiness(&self) -> (u16, String) {
        eventually(Duration::from_secs(30), || async {
            let response = reqwest::get(format!("{}/readyz", self.base)).await.ok()?;
            Some((response.status().as_u16(), response.text().await.ok()?))
        })
        .await
    }

    async fn await_ready(&self) {
        eventually(Duration::from_secs(30), || async {
            (self.readiness().await.0 == 200).then_some(())
        })
        .await;
    }

    /// Waits until a log line contains every one of `words`.
    async fn await_log_line(&self, words: &[&str]) -> String {
        self.log
            .await_line(|line| words.iter().all(|w| line.contains(w)))
            .await
    }
}

fn display(path: std::path::PathBuf) -> String {
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_is_ready_over_tls_to_postgres_redis_and_rabbitmq_with_their_private_ca() {
    let ca = TestCa::new();
    let postgres = PrivatePostgres::start_tls(&ca);
    let redis = PrivateRedis::start_tls(&ca).await;
    let vhost = TestVhost::create();
    let amqps = TlsFront::start(&ca, "127.0.0.1:5672");
    let ca_file = display(ca.ca_file());
    let service = Service::start(
        &postgres.url(
            "inventory",
            &format!("sslmode=verify-full&sslrootcert={ca_file}"),
        ),
        &format!(
            "amqps://guest:guest@127.0.0.1:{}/{}",
            amqps.port, vhost.name
        ),
        &[
            ("REDIS_URL", redis.url.clone()),
            ("REDIS_CA_FILE", ca_file.clone()),
            ("AMQP_CA_FILE", ca_file),
        ],
    );
    // Each endpoint speaks TLS only, so ready means all three connections are TLS.
    service.await_ready().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_over_tls_refuses_a_server_its_ca_did_not_sign() {
    let (ca, other) = (TestCa::new(), TestCa::new());
    let postgres = PrivatePostgres::start_tls(&ca);
    let right = format!("sslmode=verify-full&sslrootcert={}", display(ca.ca_file()));
    sqlx::PgConnection::connect(&postgres.url("postgres", &right))
        .await
        .expect("the server answers a client that trusts its CA")
        .close()
        .await
        .ok();
    for params in [
        format!(
            "sslmode=verify-full&sslrootcert={}",
            display(other.ca_file())
        ),
        // The system's roots do not know the test CA either.
        "sslmode=verify-full".to_owned(),
    ] {
        let mut command = testkit::service_command(
            BINARY,
            &postgres.url("inventory", &params),
            NO_BROKER,
            &testkit::redis_prefix(),
        );
        command.env("HTTP_ADDR", format!("127.0.0.1:{}", testkit::free_port()));
        let stderr = tokio::task::spawn_blocking(move || testkit::expect_refused_start(command))
            .await
            .expect("the check runs");
        assert!(stderr.contains("certificate"), "{params}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_and_rabbitmq_over_tls_refuse_a_server_their_ca_did_not_sign() {
    let (ca, other) = (TestCa::new(), TestCa::new());
    let database = TestDatabase::create("inventory_tls", &inventory_service::MIGRATOR).await;
    let redis = PrivateRedis::start_tls(&ca).await;
    let vhost = TestVhost::create();
    let amqps = TlsFront::start(&ca, "127.0.0.1:5672");
    let service = Service::start(
        &database.url,
        &format!(
            "amqps://guest:guest@127.0.0.1:{}/{}",
            amqps.port, vhost.name
        ),
        &[
            ("REDIS_URL", redis.url.clone()),
            // Redis with the wrong CA; RabbitMQ with none, so the system's roots.
            ("REDIS_CA_FILE", display(other.ca_file())),
        ],
    );
    service
        .await_log_line(&["Redis did not answer", "certificate"])
        .await;
    service
        .await_log_line(&["cannot reach RabbitMQ", "certificate"])
        .await;
    let (status, body) = service.readiness().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("redis") && body.contains("rabbitmq") && !body.contains("postgres"),
        "{body}"
    );
}
