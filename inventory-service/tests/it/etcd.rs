//! `STOCK_LOCK=etcd`: locks as keys under each instance's lease on a 3-member etcd cluster of
//! the test's own. One holder at a time, with increasing revisions as fencing tokens; batches
//! larger than one transaction may hold; a key no holder wants is swept; a stalled holder
//! whose lease lapsed cannot oversell; the leader's loss changes nothing; a majority lost bypasses the lock and `/readyz` names
//! etcd; and two instances on it, with the leader killed mid-sale, sell exactly the stock.

use std::time::Duration;

use inventory_service::stock::lock::etcd::{EtcdLock, MAX_KEYS_PER_TXN};
use inventory_service::stock::lock::{Backend as LockBackend, LockError, LockOptions, Locker};
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use testkit::etcd::EtcdCluster;
use testkit::{Backend, eventually, redis_prefix, wait_until_ok};

use crate::concurrency::{a_stalled_holder_cannot_oversell, sixty_deductions_across_a_fault};
use crate::helpers::{TestApp, deduction_body};

const PRODUCT: ProductId = ProductId(7);

/// A lock on `cluster` with `prefix`: lockers sharing a prefix play separate processes.
async fn etcd_lock(cluster: &EtcdCluster, prefix: &str, options: LockOptions) -> EtcdLock {
    testkit::init_logs();
    let lock = EtcdLock::connect(&cluster.endpoints(), RedisKeys::new(prefix), options)
        .await
        .expect("an etcd client");
    // Its lease is granted in the background: wait for it, as a started instance would.
    eventually(Duration::from_secs(10), || async { lock.lease_id() }).await;
    lock
}

fn options(ttl_ms: u64, wait_ms: u64, renew: bool) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        renew,
    }
}

/// The value of one series on a `/metrics` page (0 when it is not there).
fn value_of(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The value and lease of `key` on the cluster, if it exists.
async fn key_on(cluster: &EtcdCluster, key: &str) -> Option<(String, i64)> {
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("a client");
    let answer = client.get(key, None).await.expect("GET");
    answer
        .kvs()
        .first()
        .map(|kv| (kv.value_str().expect("text").to_owned(), kv.lease()))
}

#[tokio::test]
async fn one_holder_at_a_time_with_increasing_revisions_and_the_next_after_its_release() {
    let cluster = EtcdCluster::start(3).await;
    let prefix = redis_prefix();
    let a = etcd_lock(&cluster, &prefix, options(5_000, 200, true)).await;
    let b = etcd_lock(&cluster, &prefix, options(5_000, 200, true)).await;
    let held = a.acquire_all(&[PRODUCT]).await.expect("a's lock");
    assert!(!held.is_bypassed());
    let (_, lease) = key_on(&cluster, &a.key(PRODUCT)).await.expect("the key");
    assert_eq!(Some(lease), a.lease_id(), "the key lives under a's lease");
    let first: i64 = held
        .tokens()
        .next()
        .expect("a token")
        .parse()
        .expect("a revision");
    assert_eq!(
        b.acquire_all(&[PRODUCT]).await.expect_err("busy"),
        LockError::Timeout(Duration::from_millis(200))
    );
    let partial = b.try_acquire_many(&[PRODUCT, ProductId(8)]).await;
    assert_eq!(partial.busy, vec![PRODUCT], "only the held product is busy");
    partial.locks.release().await;
    held.release().await;
    assert_eq!(key_on(&cluster, &a.key(PRODUCT)).await, None, "freed");
    let again = b
        .acquire_all(&[PRODUCT])
        .await
        .expect("b's lock after the release");
    let second: i64 = again
        .tokens()
        .next()
        .expect("a token")
        .parse()
        .expect("a revision");
    assert!(
        second > first,
        "fencing tokens only grow: {first} then {second}"
    );
    again.release().await;
}

#[tokio::test]
async fn a_batch_larger_than_one_transaction_is_taken_whole_or_reported_busy_key_by_key() {
    let cluster = EtcdCluster::start(3).await;
    let prefix = redis_prefix();
    let lock = etcd_lock(&cluster, &prefix, options(5_000, 300, true)).await;
    let other = etcd_lock(&cluster, &prefix, options(5_000, 300, true)).await;
    let products: Vec<ProductId> = (1..=i64::try_from(2 * MAX_KEYS_PER_TXN + 10).expect("few"))
        .map(ProductId)
        .collect();
    let all = lock.acquire_all(&products).await.expect("every lock");
    assert_eq!(all.keys().count(), products.len());
    assert_eq!(all.ensure_held(), Ok(()));
    // Held by `lock`: another takes none of them, and one free product beyond them.
    let mut asked = products.clone();
    asked.push(ProductId(10_000));
    let partial = other.try_acquire_many(&asked).await;
    assert_eq!(partial.busy, products);
    assert_eq!(partial.locks.keys().count(), 1);
    partial.locks.release().await;
    all.release().await;
    let partial = other.try_acquire_many(&products).await;
    assert!(partial.busy.is_empty(), "all free again");
    assert_eq!(partial.locks.keys().count(), products.len());
    partial.locks.release().await;
}

#[tokio::test]
async fn a_key_left_under_the_lease_by_no_holder_is_freed_by_the_sweep() {
    let cluster = EtcdCluster::start(3).await;
    let prefix = redis_prefix();
    let lock = etcd_lock(&cluster, &prefix, options(1_000, 300, true)).await;
    // As a release that failed, or a try that committed after its acquisition moved on,
    // would leave it: a key under the instance's lease, holding a token nobody wants.
    let lease = lock.lease_id().expect("a lease");
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("a client");
    client
        .put(
            lock.key(PRODUCT),
            "a token nobody holds",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("PUT");
    // A holder's key under the same lease is left alone.
    let held = lock.acquire_all(&[ProductId(8)]).await.expect("a lock");
    eventually(Duration::from_secs(10), || async {
        key_on(&cluster, &lock.key(PRODUCT))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(key_on(&cluster, &lock.key(ProductId(8))).await.is_some());
    assert_eq!(held.ensure_held(), Ok(()));
    let freed = lock.acquire_all(&[PRODUCT]).await.expect("free again");
    assert!(!freed.is_bypassed());
    freed.release().await;
    held.release().await;
}

testkit::on_each_backend!(
    #[tokio::test]
    a_holder_whose_lease_lapsed_cannot_oversell,
);

async fn a_holder_whose_lease_lapsed_cannot_oversell(backend: Backend) {
    let cluster = EtcdCluster::start(3).await;
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let prefix = redis_prefix();
    // Keep-alive off: this instance behaves like a process paused past its lease's TTL.
    let stalling = etcd_lock(&cluster, &prefix, options(2_000, 10_000, false)).await;
    let other_process = etcd_lock(&cluster, &prefix, options(2_000, 10_000, true)).await;
    a_stalled_holder_cannot_oversell(&app, &Locker::new(stalling), &Locker::new(other_process))
        .await;
}

#[tokio::test]
async fn the_leaders_loss_changes_nothing_for_locks_held_or_taken() {
    let mut cluster = EtcdCluster::start(3).await;
    let prefix = redis_prefix();
    let lock = etcd_lock(&cluster, &prefix, options(2_000, 5_000, true)).await;
    let other = etcd_lock(&cluster, &prefix, options(2_000, 300, true)).await;
    let held = lock.acquire_all(&[PRODUCT]).await.expect("the lock");
    let leader = cluster.leader().await;
    cluster.kill(leader);
    // Three TTLs later the lease was kept alive through the new leader.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(held.ensure_held(), Ok(()));
    assert!(!held.lost().is_cancelled());
    assert_eq!(
        other.acquire_all(&[PRODUCT]).await.expect_err("still held"),
        LockError::Timeout(Duration::from_millis(300))
    );
    let elsewhere = other.acquire_all(&[ProductId(8)]).await.expect("another");
    assert!(!elsewhere.is_bypassed());
    elsewhere.release().await;
    held.release().await;
    cluster.restart(leader).await;
    // The other's calls after the kill went to members that answer.
    let stats = inventory_service::stock::lock::StockLock::stats(&other);
    assert_eq!(stats.bypassed, 0, "{stats:?}");
    assert_eq!(stats.acquired, 1, "{stats:?}");
}

#[tokio::test]
async fn a_majority_lost_loses_the_locks_bypasses_and_makes_readyz_name_etcd() {
    let mut cluster = EtcdCluster::start(3).await;
    let endpoints = cluster.endpoints();
    let app = TestApp::spawn_with(move |c| {
        c.stock_lock = LockBackend::Etcd;
        c.etcd_endpoints = endpoints;
        c.lock_ttl = Duration::from_millis(2_000);
    })
    .await;
    let lock = app.deductions.locker();
    wait_until_ok(&app.url("/readyz")).await;
    let held = lock.acquire(PRODUCT).await.expect("the lock");
    assert!(!held.is_bypassed());
    cluster.kill(0);
    cluster.kill(1);
    // No majority keeps the lease alive: it lapses, and the holder is told before commit.
    tokio::time::timeout(Duration::from_secs(10), held.lost().cancelled())
        .await
        .expect("the loss is signalled");
    assert_eq!(held.ensure_held(), Err(LockError::Lost));
    let bypassed = lock.acquire(PRODUCT).await.expect("bypassed, not failed");
    assert!(bypassed.is_bypassed());
    let problem: serde_json::Value = {
        let answer = app
            .anonymous
            .get(app.url("/readyz"))
            .send()
            .await
            .expect("readyz");
        assert_eq!(answer.status(), 503);
        answer.json().await.expect("problem+json")
    };
    let detail = problem["detail"].as_str().expect("a detail");
    assert!(
        detail.contains("etcd") && !detail.contains("redis"),
        "{detail}"
    );
    // Deductions go on meanwhile: the conditional update decides.
    app.create_product(1, 5).await;
    let answer = app
        .admin
        .post(app.url("/deductions"))
        .json(&deduction_body("while-etcd-is-down", &[(1, 2)]))
        .send()
        .await
        .expect("POST /deductions");
    assert_eq!(answer.status(), 200);
    assert_eq!(app.stock(1).await, 3);
    cluster.restart(0).await;
    cluster.restart(1).await;
    wait_until_ok(&app.url("/readyz")).await;
    let again = lock.acquire(PRODUCT).await.expect("the lock again");
    assert!(!again.is_bypassed());
    again.release().await;
    held.release().await;
    // What happened is counted under `backend="etcd"` (registered at zero from the start),
    // renewals once the new lease was kept alive.
    eventually(Duration::from_secs(10), || async {
        let metrics = app.metrics().await;
        (value_of(&metrics, r#"lock_renewals_total{backend="etcd"}"#) >= 1.0).then_some(())
    })
    .await;
    let metrics = app.metrics().await;
    for series in [
        r#"lock_acquisitions_total{result="acquired",backend="etcd"}"#,
        r#"lock_acquisitions_total{result="bypassed",backend="etcd"}"#,
        r#"lock_acquisitions_total{result="lost",backend="etcd"}"#,
        r#"lock_wait_seconds_count{backend="etcd"}"#,
    ] {
        assert!(
            value_of(&metrics, series) >= 1.0,
            "{series} counted nothing"
        );
    }
}

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    two_instances_on_etcd_with_the_leader_killed_mid_sale_sell_exactly_the_stock,
);

async fn two_instances_on_etcd_with_the_leader_killed_mid_sale_sell_exactly_the_stock(
    backend: Backend,
) {
    let mut cluster = EtcdCluster::start(3).await;
    let endpoints = cluster.endpoints();
    let prefix = redis_prefix();
    let on_etcd = move |c: &mut inventory_service::Config| {
        c.stock_lock = LockBackend::Etcd;
        c.etcd_endpoints = endpoints.clone();
        c.redis_key_prefix = prefix.clone();
        c.lock_ttl = Duration::from_millis(2_000);
        c.lock_wait = Duration::from_secs(30);
    };
    let (first, second) = TestApp::two_on_one_database(backend, on_etcd).await;
    for app in [&first, &second] {
        wait_until_ok(&app.url("/readyz")).await;
    }
    first.create_product(1, 20).await;

    let leader = cluster.leader().await;
    sixty_deductions_across_a_fault(&first, &second, async { cluster.kill(leader) }).await;
    for app in [&first, &second] {
        let locker = app.deductions.locker();
        assert_eq!(locker.backend(), "etcd");
        let stats = locker.stats();
        assert!(stats.acquired > 0, "{stats:?}");
        // Calls caught by the election may bypass (counted); the sale is exact regardless.
    }
    cluster.restart(leader).await;
}
