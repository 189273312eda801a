//! A Redis that stops answering (`SIGSTOP`) instead of refusing connections: after one call
//! times out, deductions bypass the lock without asking Redis, and take locks again once a
//! health check gets an answer. Counted per locker, not in the process-wide metrics.

use std::time::Duration;

use inventory_service::stock::lock::RedisLock;
use platform::storage::redis::health::RedisHealth;
use serde_json::json;
use shared::ids::ProductId;
use testkit::redis::PrivateRedis;
use testkit::{TestDatabase, TestVhost, eventually, redis_prefix};
use tokio_util::sync::CancellationToken;

use crate::helpers::ADMIN_TOKEN;

/// Generous: the work under test takes milliseconds once Redis is skipped.
const DEADLINE: Duration = Duration::from_secs(60);

/// A locker on `redis`, whose calls time out after 300 ms, with its own health check.
fn watched_locker(redis: &PrivateRedis) -> (RedisLock, RedisHealth, tokio_util::sync::DropGuard) {
    let conn = platform::storage::redis::connect_with_timeout(
        &redis.url,
        None,
        Duration::from_millis(300),
        None,
    )
    .expect("a Redis manager");
    crate::helpers::watched_locker(conn)
}

#[tokio::test]
async fn after_one_timeout_a_hung_redis_is_not_asked_again_until_it_answers() {
    let mut redis = PrivateRedis::start().await;
    let (locker, health, _watch) = watched_locker(&redis);
    let products = [ProductId(1), ProductId(2)];
    let locks = locker.acquire_all(&products).await.expect("the locks");
    assert!(!locks.is_bypassed());
    locks.release().await;

    redis.freeze();
    tokio::time::timeout(DEADLINE, async {
        for _ in 0..20 {
            let locks = locker.acquire_all(&products).await.expect("bypassed");
            assert!(locks.is_bypassed());
            assert_eq!(locks.ensure_held(), Ok(()));
            locks.release().await;
        }
    })
    .await
    .expect("20 acquisitions while Redis is stopped");
    let stats = locker.stats();
    assert_eq!(stats.bypassed, 20);
    assert!(
        stats.service_failures <= 1,
        "only the first acquisition may have waited for Redis: {stats:?}"
    );
    assert!(health.is_down());

    redis.resume();
    // The key the timed-out SET left when Redis woke up is deleted behind it, so the same
    // products are lockable again well before that key would have expired.
    eventually(Duration::from_secs(10), || async {
        let locks = locker.acquire_all(&products).await.expect("the locks");
        let held = !locks.is_bypassed();
        locks.release().await;
        held.then_some(())
    })
    .await;
    assert!(!health.is_down());
    assert_eq!(locker.stats().acquired, 2);
    assert_eq!(health.outages(), 1);
}

#[tokio::test]
async fn deductions_keep_flowing_through_the_service_while_redis_is_stopped() {
    testkit::init_logs();
    let mut redis = PrivateRedis::start().await;
    let database = TestDatabase::create("inventory", &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let config = inventory_service::Config {
        http_addr: "127.0.0.1:0".parse().expect("an address"),
        database_urls: vec![database.url.clone()],
        database_max_connections: 5,
        redis_url: redis.url.clone(),
        redis_key_prefix: redis_prefix(),
        redis_timeout: Duration::from_millis(300),
        amqp_urls: vec![vhost.url.clone()],
        admin_token: Some(ADMIN_TOKEN.to_owned()),
        ..Default::default()
    };
    let state = inventory_service::build_state(config)
        .await
        .expect("the service state builds");
    let locker = state.locker.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let base = format!("http://{}", listener.local_addr().expect("bound"));
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(inventory_service::serve(state, listener, shutdown));
    let client = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
    };
    let created = post(
        "/products",
        json!({"product_id": 5, "name": "cup", "stock": 100}),
    )
    .await
    .expect("POST /products");
    assert_eq!(created.status(), 201);

    redis.freeze();
    tokio::time::timeout(DEADLINE, async {
        for n in 0..10 {
            let deducted = post(
                "/deductions",
                json!({"deduction_id": format!("d{n}"), "items": [{"product_id": 5, "quantity": 1}]}),
            )
            .await
            .expect("POST /deductions");
            assert_eq!(deducted.status(), 200);
        }
    })
    .await
    .expect("10 deductions while Redis is stopped");
    let stats = locker.stats();
    assert!(stats.bypassed >= 10, "{stats:?}");
    assert!(stats.service_failures <= 1, "{stats:?}");
    let ready = client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("GET /readyz");
    assert_eq!(ready.status(), 503);
    let problem: serde_json::Value = ready.json().await.expect("a problem");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("redis")),
        "{problem}"
    );

    redis.resume();
    let acquired_before = locker.stats().acquired;
    let mut n = 10;
    eventually(Duration::from_secs(10), || {
        n += 1;
        let request = post(
            "/deductions",
            json!({"deduction_id": format!("d{n}"), "items": [{"product_id": 6 + n, "quantity": 1}]}),
        );
        let locker = locker.clone();
        async move {
            // Unknown products: a 404 after taking (or bypassing) the lock, nothing deducted.
            request.await.expect("POST /deductions");
            (locker.stats().acquired > acquired_before).then_some(())
        }
    })
    .await;
    let product: serde_json::Value = client
        .get(format!("{base}/products/5"))
        .send()
        .await
        .expect("GET /products/5")
        .json()
        .await
        .expect("a product");
    assert_eq!(product["stock"], 90);
}
