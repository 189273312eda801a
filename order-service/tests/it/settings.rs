//! Settings: each one is range-checked at start, and the pool's sessions carry the server-side
//! safeguards docs/configuration.md promises.

use testkit::{BackendDatabase, TestDatabase};

use crate::helpers::config_for;

/// Values that cannot work, besides [`testkit::REFUSED_BY_EVERY_SERVICE`]. Each must stop the
/// binary before it serves, with a message naming the variable.
const REFUSED: &[(&str, &str)] = &[
    ("RECONCILE_EVERY_SECS", "0"),
    ("RECONCILE_AFTER_SECS", "0"),
    ("RELAY_BATCH_SIZE", "-5"),
    ("OUTBOX_MAX_ATTEMPTS", "0"),
    ("OUTBOX_RETRY_BASE_MS", "0"),
    ("OUTBOX_RETRY_MAX_SECS", "0"),
    ("CONSUMER_CONCURRENCY", "0"),
    ("VACUUM_EVERY_SECS", "0"),
    ("INTAKE_BATCH_MAX", "0"),
    // A day at most; no negative window.
    ("ORDER_PAYMENT_WINDOW_SECS", "86401"),
    ("ORDER_PAYMENT_WINDOW_SECS", "-1"),
    ("ORDER_PAYMENT_WINDOW_SECS", "soon"),
    ("IDEMPOTENCY_TOKEN_TTL_SECS", "soon"),
    ("IDEMPOTENCY_TOKEN_SECRET", "too short"),
    ("AMQP_URL", "http://127.0.0.1:5672"),
    // Beside the DATABASE_URL every start here is given: which one is meant?
    ("DATABASE_URLS", "postgres://postgres@127.0.0.1:5432/orders"),
    ("AUTH_JWT_SECRET", "shorter than 32 bytes"),
    ("AUTH_JWKS_URL", "not a url"),
    ("AUTH_JWKS_URL", "ftp://id.example/jwks.json"),
    ("INVENTORY_URL", "notaurl"),
    ("INVENTORY_URL", "ftp://127.0.0.1:8081"),
    // A claim check without identity would check nothing.
    ("AUTH_JWT_ISSUER", "https://id.example"),
    ("AUTH_JWT_AUDIENCE", "orders"),
    // A few minutes at most (RFC 7519 §4.1.4).
    ("AUTH_JWT_LEEWAY_SECS", "301"),
    ("AUTH_JWT_LEEWAY_SECS", "-1"),
    ("CORS_ALLOWED_ORIGINS", "https://shop.example/path"),
    ("CORS_ALLOWED_ORIGINS", "shop.example"),
];

#[tokio::test(flavor = "multi_thread")]
async fn a_setting_that_cannot_work_stops_the_start_naming_the_variable() {
    let db = TestDatabase::create("orders_settings", &order_service::MIGRATOR).await;
    testkit::assert_each_setting_refused(env!("CARGO_BIN_EXE_order-service"), &db.url, REFUSED)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_secret_and_a_jwks_url_together_stop_the_start() {
    let stderr = refused_start_with(&[
        ("AUTH_JWT_SECRET", "a secret that is long enough, 32+ bytes"),
        ("AUTH_JWKS_URL", "https://id.example/jwks.json"),
    ])
    .await;
    assert!(
        stderr.contains("AUTH_JWT_SECRET") && stderr.contains("AUTH_JWKS_URL"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn amqp_url_and_amqp_urls_together_stop_the_start_naming_both() {
    // The command carries an AMQP_URL already.
    let stderr = refused_start_with(&[("AMQP_URLS", "amqp://guest:guest@127.0.0.1:2/%2f")]).await;
    assert!(
        stderr.contains("AMQP_URL ") && stderr.contains("AMQP_URLS"),
        "{stderr}"
    );
}

/// Starts the binary with `env` added to a working configuration, expects it to refuse the
/// start, and returns what it wrote to stderr.
async fn refused_start_with(env: &[(&str, &str)]) -> String {
    let db = TestDatabase::create("orders_settings", &order_service::MIGRATOR).await;
    let mut command = testkit::service_command_on(
        testkit::free_port(),
        env!("CARGO_BIN_EXE_order-service"),
        &db.url,
        testkit::NO_BROKER,
    );
    command.envs(env.iter().copied());
    tokio::task::spawn_blocking(move || testkit::expect_refused_start(command))
        .await
        .expect("the check runs")
}

#[tokio::test]
async fn pooled_connections_end_sessions_idle_in_a_transaction_after_30_s_and_plan_every_run() {
    let db = BackendDatabase::Postgres(
        TestDatabase::create("orders_settings", &order_service::MIGRATOR).await,
    );
    let state = order_service::build_state(config_for(&db, &testkit::redis_prefix()))
        .await
        .expect("state");
    let pool = state.db.postgres().expect("PostgreSQL").clone();
    let setting = |name| testkit::session_setting(&pool, name);
    assert_eq!(setting("idle_in_transaction_session_timeout").await, "30s");
    assert_eq!(setting("plan_cache_mode").await, "force_custom_plan");
}
