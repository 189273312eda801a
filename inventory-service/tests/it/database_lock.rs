//! `STOCK_LOCK=database`: no lock service, the rows of the service's own database serialise
//! the writers. Two instances on it never oversell, nothing is written to Redis, and the
//! service is ready and sells with Redis unreachable.

use std::time::Duration;

use inventory_service::stock::lock::Backend as LockBackend;
use testkit::Backend;

use crate::concurrency::stampede_over;
use crate::helpers::TestApp;

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    two_instances_on_the_database_lock_sell_exactly_the_stock,
    with_redis_unreachable_an_instance_on_the_database_lock_is_ready_and_sells,
);

fn on_rows(config: &mut inventory_service::Config) {
    config.stock_lock = LockBackend::Database;
    config.lock_wait = Duration::from_secs(30);
}

async fn two_instances_on_the_database_lock_sell_exactly_the_stock(backend: Backend) {
    let (first, second) = TestApp::two_on_one_database(backend, on_rows).await;
    first.create_product(1, 20).await;
    for app in [&first, &second] {
        assert_eq!(app.deductions.locker().backend(), "database");
    }

    let ids: Vec<String> = (0..60).map(|i| format!("rows-{i}")).collect();
    let statuses = stampede_over(&[&first, &second], 1, &ids).await;
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (20, 40), "{statuses:?}");
    assert_eq!(first.stock(1).await, 0);

    let mut redis = redis::Client::open(testkit::redis_url())
        .expect("a Redis client")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    for app in [&first, &second] {
        let pattern = format!("{}*", app.config.redis_key_prefix);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut redis)
            .await
            .expect("KEYS");
        assert!(keys.is_empty(), "nothing in Redis: {keys:?}");
    }
    let metrics = first.metrics().await;
    assert!(
        metrics.contains(r#"lock_acquisitions_total{result="acquired",backend="database"}"#),
        "the lock's metrics carry its backend"
    );
}

async fn with_redis_unreachable_an_instance_on_the_database_lock_is_ready_and_sells(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |c| {
        on_rows(c);
        c.redis_url = "redis://127.0.0.1:1/0".to_owned();
    })
    .await;
    // Ready once the database and the broker answer: Redis is no concern of its readiness.
    let readyz = app.url("/readyz");
    testkit::wait_until_ok(&readyz).await;
    app.create_product(1, 2).await;
    assert_eq!(app.deduct("d-1", &[(1, 2)]).await.status(), 200);
    assert_eq!(app.deduct("d-2", &[(1, 1)]).await.status(), 409);
    assert_eq!(
        app.deductions.locker().stats().bypassed,
        0,
        "not a bypass: the chosen lock"
    );
}
