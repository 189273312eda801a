//! Settings: each one is range-checked at start, and the pool's sessions carry the server-side
//! safeguards docs/configuration.md promises.

use inventory_service::config::Config;
use testkit::TestDatabase;

/// Values that cannot work, besides [`testkit::REFUSED_BY_EVERY_SERVICE`]. Each must stop the
/// binary before it serves, with a message naming the variable.
const REFUSED: &[(&str, &str)] = &[
    ("LOCK_TTL_MS", "10"),
    ("LOCK_TTL_MS", "ten seconds"),
    ("LOCK_WAIT_MS", "0"),
    ("STOCK_LOCK", "zookeeper"),
    // Redlock without its masters.
    ("STOCK_LOCK", "redlock"),
    // etcd without its members, a Redis Cluster without its nodes.
    ("STOCK_LOCK", "etcd"),
    ("STOCK_LOCK", "redis-cluster"),
    ("CONSUMER_CONCURRENCY", "-1"),
    ("RESERVATIONS_REQUIRE_ADMIN", "yes"),
    ("CORS_ALLOWED_ORIGINS", "https://shop.example/"),
    ("AMQP_URL", "not a url"),
    ("DATABASE_URL", "not a url"),
    // Beside the DATABASE_URL every start here is given: which one is meant?
    (
        "DATABASE_URLS",
        "postgres://postgres@127.0.0.1:5432/inventory",
    ),
];

#[tokio::test(flavor = "multi_thread")]
async fn a_setting_that_cannot_work_stops_the_start_naming_the_variable() {
    let db = TestDatabase::create("inventory_settings", &inventory_service::MIGRATOR).await;
    testkit::assert_each_setting_refused(env!("CARGO_BIN_EXE_inventory-service"), &db.url, REFUSED)
        .await;
}

#[tokio::test]
async fn pooled_connections_end_sessions_idle_in_a_transaction_after_30_s_and_plan_every_run() {
    let db = TestDatabase::create("inventory_settings", &inventory_service::MIGRATOR).await;
    let config = Config {
        database_urls: vec![db.url.clone()],
        redis_url: testkit::redis_url(),
        redis_key_prefix: testkit::redis_prefix(),
        amqp_urls: vec![testkit::NO_BROKER.into()],
        ..Config::default()
    };
    let state = inventory_service::build_state(config).await.expect("state");
    let pool = state.db.postgres().expect("PostgreSQL").clone();
    let setting = |name| testkit::session_setting(&pool, name);
    assert_eq!(setting("idle_in_transaction_session_timeout").await, "30s");
    assert_eq!(setting("plan_cache_mode").await, "force_custom_plan");
}
