//! The configuration every in-process order-service of a test starts from.

use std::time::Duration;

use order_service::config::Config;
use testkit::BackendDatabase;

/// The configuration of a service on this test's database and Redis prefix, with its broker
/// unreachable and reconciliation idle until a test changes them.
pub fn config_for(db: &BackendDatabase, redis_prefix: &str) -> Config {
    Config {
        http_addr: "127.0.0.1:0".parse().expect("address"),
        database_urls: vec![db.url().to_owned()],
        database_max_connections: 10,
        redis_url: testkit::redis_url(),
        redis_key_prefix: redis_prefix.to_owned(),
        // The broker stays down unless a test sets a vhost.
        amqp_urls: vec![testkit::NO_BROKER.into()],
        admin_token: Some("test-admin-token".into()),
        inventory_url: "http://127.0.0.1:1".into(),
        reconcile_after: Duration::from_secs(3600),
        reconcile_every: Duration::from_secs(3600),
        ..Config::default()
    }
}
