//! `STOCK_LOCK=redis-cluster`: the Redis lock on a Redis Cluster of the test's own (three
//! masters, three replicas). A batch's products fall in many slots on every master and are
//! locked without a cross-slot error; a holder paused past its TTL cannot oversell; and two
//! instances selling one product go on through a master's failover, without a restart; and
//! `/readyz` names redis while the cluster cannot serve every slot.

use std::collections::BTreeSet;
use std::time::Duration;

use inventory_service::stock::lock::{Backend as LockBackend, LockOptions, Locker, RedisLock};
use platform::storage::redis::connect_cluster;
use platform::storage::redis::health::RedisHealth;
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use testkit::redis_cluster::PrivateRedisCluster;
use testkit::{Backend, redis_prefix, scrape_metric, wait_until_ok};

use crate::concurrency::{a_stalled_holder_cannot_oversell, sixty_deductions_across_a_fault};
use crate::helpers::TestApp;

/// A call may wait this long for a slot whose master failed: well above a test cluster's
/// failover (about 2.5 s alone, more on a machine busy with the whole suite), so the lock
/// never counts Redis down through one.
const WAIT: Duration = Duration::from_secs(30);

/// A Redis lock on `cluster` with `prefix`: lockers sharing a prefix play separate processes.
fn locker(cluster: &PrivateRedisCluster, prefix: &str, options: LockOptions) -> Locker {
    let conn = connect_cluster(&cluster.settings(WAIT), Duration::from_millis(500), None)
        .expect("a cluster connection");
    Locker::new(RedisLock::new(
        conn,
        RedisKeys::new(prefix),
        options,
        RedisHealth::default(),
    ))
}

fn options(ttl_ms: u64, renew: bool) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_secs(10),
        renew,
    }
}

#[tokio::test]
async fn a_batch_locks_products_whose_keys_fall_on_every_master() {
    let cluster = PrivateRedisCluster::start().await;
    let prefix = redis_prefix();
    let keys = RedisKeys::new(prefix.clone());
    let products: Vec<ProductId> = (1..=40).map(ProductId).collect();
    let mut masters = BTreeSet::new();
    for product in &products {
        masters.insert(cluster.master_of(&keys.product_lock(*product)).await);
    }
    assert_eq!(masters.len(), 3, "the batch spans every master");

    let first = locker(&cluster, &prefix, options(10_000, true));
    let second = locker(&cluster, &prefix, options(10_000, true));
    assert_eq!(first.backend(), "redis-cluster");

    let held = first.try_acquire_many(&products).await;
    assert!(!held.locks.is_bypassed());
    assert!(held.busy.is_empty(), "{:?}", held.busy);
    let locked = cluster.keys(&format!("{prefix}lock:product:*")).await;
    assert_eq!(locked.len(), products.len(), "{locked:?}");

    // Another process finds every one of them busy, and takes them once released.
    let refused = second.try_acquire_many(&products).await;
    assert_eq!(refused.busy, products);
    refused.locks.release().await;
    assert_eq!(held.locks.ensure_held(), Ok(()));
    held.locks.release().await;
    assert!(
        cluster
            .keys(&format!("{prefix}lock:product:*"))
            .await
            .is_empty()
    );
    let all = second
        .acquire_all(&products)
        .await
        .expect("every lock, once released");
    assert!(!all.is_bypassed());
    all.release().await;
    let stats = second.stats();
    assert_eq!(stats.bypassed, 0, "{stats:?}");
}

#[tokio::test]
async fn a_holder_stalled_past_its_ttl_on_a_redis_cluster_cannot_oversell() {
    let cluster = PrivateRedisCluster::start().await;
    let app = TestApp::spawn_with(|_| {}).await;
    let prefix = redis_prefix();
    // Renewal off: this holder behaves like a process paused (SIGSTOP) with its watchdog.
    let stalling = locker(&cluster, &prefix, options(300, false));
    let other_process = locker(&cluster, &prefix, options(300, true));
    let lost = r#"lock_acquisitions_total{result="lost",backend="redis-cluster"}"#;
    let renewed = r#"lock_renewals_total{backend="redis-cluster"}"#;
    let base = app.url("");
    let (lost_before, renewed_before) = (
        scrape_metric(&base, lost).await,
        scrape_metric(&base, renewed).await,
    );
    a_stalled_holder_cannot_oversell(&app, &stalling, &other_process).await;

    // A lock held past its TTL is still held only if its watchdog renewed it on the
    // cluster; the loss and the renewals are counted under the cluster's label.
    let renewing = locker(&cluster, &prefix, options(1_500, true));
    let held = renewing.acquire(ProductId(2)).await.expect("a lock");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(held.ensure_held(), Ok(()), "renewed past its 1.5 s TTL");
    held.release().await;
    assert!(scrape_metric(&base, lost).await > lost_before, "{lost}");
    assert!(
        scrape_metric(&base, renewed).await > renewed_before,
        "{renewed}"
    );
}

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    two_instances_on_a_redis_cluster_with_a_master_killed_mid_sale_sell_exactly_the_stock,
);

async fn two_instances_on_a_redis_cluster_with_a_master_killed_mid_sale_sell_exactly_the_stock(
    backend: Backend,
) {
    let mut cluster = PrivateRedisCluster::start().await;
    let settings = cluster.settings(WAIT);
    let prefix = redis_prefix();
    let on_cluster = {
        let (settings, prefix) = (settings.clone(), prefix.clone());
        move |c: &mut inventory_service::Config| {
            c.stock_lock = LockBackend::RedisCluster;
            c.redis_cluster = Some(settings.clone());
            c.redis_key_prefix = prefix.clone();
            c.lock_wait = Duration::from_secs(30);
        }
    };
    let (first, second) = TestApp::two_on_one_database(backend, on_cluster).await;
    first.create_product(1, 20).await;
    let hot = RedisKeys::new(prefix).product_lock(ProductId(1));
    let master = cluster.master_of(&hot).await;

    sixty_deductions_across_a_fault(&first, &second, async { cluster.kill(master) }).await;
    let promoted = cluster.await_failover(&hot, master).await;
    assert_ne!(promoted, master);

    // The failover was followed without a restart: both instances lock product 1 again.
    for (i, app) in [&first, &second].into_iter().enumerate() {
        let before = app.deductions.locker().stats();
        let status = app.deduct(&format!("after-{i}"), &[(1, 1)]).await.status();
        assert_eq!(status, 409, "product 1 is sold out");
        let after = app.deductions.locker().stats();
        assert_eq!(app.deductions.locker().backend(), "redis-cluster");
        assert!(after.acquired > before.acquired, "{before:?} → {after:?}");
    }
    let metrics = first.metrics().await;
    for series in [
        r#"lock_acquisitions_total{result="acquired",backend="redis-cluster"}"#,
        r#"lock_wait_seconds_bucket{backend="redis-cluster","#,
    ] {
        assert!(metrics.contains(series), "missing {series}");
    }
    cluster.restart(master);
    cluster.await_healthy().await;
}

#[tokio::test]
async fn readyz_names_redis_while_the_cluster_cannot_serve_every_slot() {
    let mut cluster = PrivateRedisCluster::start().await;
    let settings = cluster.settings(Duration::from_secs(2));
    let app = TestApp::spawn_with(move |c| {
        c.stock_lock = LockBackend::RedisCluster;
        c.redis_cluster = Some(settings);
    })
    .await;
    let readyz = app.url("/readyz");
    wait_until_ok(&readyz).await;

    // Two masters of three gone: no majority is left to promote their replicas, and the
    // nodes left call the cluster failed. Every node that answers says so.
    let mut masters = Vec::new();
    for n in 0.. {
        let master = cluster.master_of(&format!("{{probe-{n}}}")).await;
        if !masters.contains(&master) {
            masters.push(master);
        }
        if masters.len() == 2 {
            break;
        }
    }
    for master in &masters {
        cluster.kill(*master);
    }
    let detail = app.unready_detail().await;
    assert!(detail.contains("redis"), "{detail}");

    for master in masters {
        cluster.restart(master);
    }
    wait_until_ok(&readyz).await;
}
