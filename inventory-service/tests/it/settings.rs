//! Settings: each one is range-checked at start, and the pool's sessions carry the server-side
//! safeguards docs/configuration.md promises.

use inventory_service::config::Config;
use testkit::TestDatabase;

/// Values that cannot work. Each must stop the binary before it serves, with a message naming
/// the variable.
const REFUSED: &[(&str, &str)] = &[
    ("LOCK_TTL_MS", "10"),
    ("LOCK_TTL_MS", "ten seconds"),
    ("LOCK_WAIT_MS", "0"),
    ("RELAY_BATCH_SIZE", "0"),
    ("CONSUMER_PREFETCH", "0"),
    ("CONSUMER_CONCURRENCY", "-1"),
    ("RETENTION_SECS", "0"),
    ("DATABASE_MAX_CONNECTIONS", "0"),
    ("REQUEST_TIMEOUT_SECS", "0"),
    ("REDIS_TIMEOUT_MS", "0"),
    ("REDIS_SENTINELS", "127.0.0.1:26379"),
    ("REDIS_SENTINEL_MASTER", "mymaster"),
    ("RATE_LIMIT_PER_SEC", "-1"),
    ("RATE_LIMIT_BURST", "lots"),
    ("RESERVATIONS_REQUIRE_ADMIN", "yes"),
    ("CORS_ALLOWED_ORIGINS", "https://shop.example/"),
    ("HTTP_ADDR", "nowhere"),
    ("AMQP_URL", "not a url"),
    ("DATABASE_URL", "not a url"),
    // Beside the DATABASE_URL every start here is given: which one is meant?
    (
        "DATABASE_URLS",
        "postgres://postgres@127.0.0.1:5432/inventory",
    ),
    ("SHUTDOWN_DRAIN_SECS", "-1"),
    ("SHUTDOWN_DRAIN_SECS", "301"),
    ("SHUTDOWN_DRAIN_SECS", "five"),
    ("REDIS_CA_FILE", "/nonexistent/ca.pem"),
    ("AMQP_CA_FILE", "/etc/hostname"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
    ("AMQP_URLS", "amqp://guest:guest@127.0.0.1:1/%2f,not a url"),
    ("AMQP_URLS", "amqp://guest:guest@127.0.0.1:1/%2f,"),
];

#[tokio::test(flavor = "multi_thread")]
async fn a_setting_that_cannot_work_stops_the_start_naming_the_variable() {
    let db = TestDatabase::create("inventory_settings", &inventory_service::MIGRATOR).await;
    testkit::assert_each_setting_refused(env!("CARGO_BIN_EXE_inventory-service"), &db.url, REFUSED)
        .await;
}

#[tokio::test]
async fn pooled_connections_end_sessions_idle_in_a_transaction_after_30_s() {
    let db = TestDatabase::create("inventory_settings", &inventory_service::MIGRATOR).await;
    let config = Config {
        database_urls: vec![db.url.clone()],
        redis_url: testkit::redis_url(),
        redis_key_prefix: testkit::redis_prefix(),
        amqp_urls: vec!["amqp://guest:guest@127.0.0.1:1/%2f".into()],
        ..Config::default()
    };
    let state = inventory_service::build_state(config).await.expect("state");
    let mut conn = state.db.acquire().await.expect("a pooled connection");
    let timeout: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(&mut *conn)
        .await
        .expect("read the setting");
    assert_eq!(timeout, "30s");
}
