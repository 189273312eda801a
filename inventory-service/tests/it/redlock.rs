//! `STOCK_LOCK=redlock`: locks on a majority of three independent Redis masters of the test's
//! own. One holder at a time; a minority of masters frozen changes nothing, a majority
//! frozen bypasses the lock and makes `/readyz` name redis; a holder that stops renewing learns before commit that its lock
//! is gone, and cannot oversell; and two instances on it, with a master frozen mid-sale, sell
//! exactly the stock.

use std::time::Duration;

use futures_util::future::join_all;
use inventory_service::stock::lock::redlock::Redlock;
use inventory_service::stock::lock::{Backend as LockBackend, LockError, LockOptions, Locker};
use platform::storage::redis::connect_with_timeout;
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use testkit::redis::PrivateRedis;
use testkit::{Backend, redis_prefix, wait_until_ok};

use crate::concurrency::{a_stalled_holder_cannot_oversell, sixty_deductions_across_a_fault};
use crate::helpers::TestApp;

const PRODUCT: ProductId = ProductId(7);

async fn three_masters() -> Vec<PrivateRedis> {
    join_all((0..3).map(|_| PrivateRedis::start())).await
}

/// A Redlock over `masters` with `prefix`: lockers sharing a prefix play separate processes.
fn redlock(masters: &[PrivateRedis], prefix: &str, options: LockOptions) -> Redlock {
    let conns = masters
        .iter()
        .map(|m| {
            connect_with_timeout(&m.url, None, Duration::from_millis(300), None)
                .expect("a Redis manager")
        })
        .collect();
    Redlock::new(
        conns,
        RedisKeys::new(prefix),
        options,
        Duration::from_millis(2),
    )
}

fn options(ttl_ms: u64, wait_ms: u64, renew: bool) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        renew,
    }
}

#[tokio::test]
async fn one_holder_at_a_time_and_the_next_after_its_release() {
    let masters = three_masters().await;
    let prefix = redis_prefix();
    let (a, b) = (
        redlock(&masters, &prefix, options(10_000, 200, true)),
        redlock(&masters, &prefix, options(10_000, 200, true)),
    );
    assert_eq!(a.quorum(), 2);
    let held = a.acquire_all(&[PRODUCT]).await.expect("a's lock");
    assert!(!held.is_bypassed());
    let holding = holders_of(&masters, &a.key(PRODUCT), &held).await;
    assert!(
        holding >= a.quorum(),
        "taken on a majority of the masters: {holding}"
    );
    assert_eq!(
        b.acquire_all(&[PRODUCT]).await.expect_err("busy"),
        LockError::Timeout(Duration::from_millis(200))
    );
    let partial = b.try_acquire_many(&[PRODUCT, ProductId(8)]).await;
    assert_eq!(partial.busy, vec![PRODUCT], "only the held product is busy");
    partial.locks.release().await;
    held.release().await;
    let again = b
        .acquire_all(&[PRODUCT])
        .await
        .expect("b's lock after the release");
    assert!(!again.is_bypassed());
    again.release().await;
}

#[tokio::test]
async fn a_minority_frozen_changes_nothing_and_a_majority_frozen_bypasses() {
    let mut masters = three_masters().await;
    let lock = redlock(&masters, &redis_prefix(), options(600, 2_000, true));
    masters[0].freeze();
    let held = lock
        .acquire_all(&[PRODUCT])
        .await
        .expect("a lock with two masters");
    assert!(!held.is_bypassed());
    // Several renewals later it is still ours, renewed by the two that answer.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(held.ensure_held(), Ok(()));
    held.release().await;

    masters[1].freeze();
    let bypassed = lock
        .acquire_all(&[PRODUCT])
        .await
        .expect("bypassed, not failed");
    assert!(bypassed.is_bypassed());
    assert_eq!(bypassed.ensure_held(), Ok(()));
    assert_eq!(
        inventory_service::stock::lock::StockLock::stats(&lock).bypassed,
        1
    );
    masters[0].resume();
    masters[1].resume();
}

#[tokio::test]
async fn readyz_names_redis_while_a_majority_of_the_masters_is_frozen() {
    let mut masters = three_masters().await;
    let urls: Vec<String> = masters.iter().map(|m| m.url.clone()).collect();
    let app = TestApp::spawn_with(move |c| {
        c.stock_lock = LockBackend::Redlock;
        c.redlock_urls = urls;
        c.redis_timeout = Duration::from_millis(300);
    })
    .await;
    let readyz = app.url("/readyz");
    wait_until_ok(&readyz).await;
    let status = || async { app.anonymous.get(&readyz).send().await.expect("readyz") };
    // One of three frozen: a majority answers, the instance stays ready.
    masters[0].freeze();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status().await.status(), 200);
    masters[1].freeze();
    let detail = app.unready_detail().await;
    assert!(detail.contains("redis"), "{detail}");
    masters[0].resume();
    masters[1].resume();
    wait_until_ok(&readyz).await;
}

#[tokio::test]
async fn a_holder_that_stops_renewing_learns_before_commit_that_its_lock_is_gone() {
    let masters = three_masters().await;
    let prefix = redis_prefix();
    let stalled = redlock(&masters, &prefix, options(300, 1_000, false));
    let held = stalled.acquire_all(&[PRODUCT]).await.expect("the lock");
    assert_eq!(held.ensure_held(), Ok(()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        held.ensure_held(),
        Err(LockError::Lost),
        "past its validity"
    );
    let next = redlock(&masters, &prefix, options(10_000, 1_000, true));
    let taken = next.acquire_all(&[PRODUCT]).await.expect("free again");
    assert!(!taken.is_bypassed());
    // The stalled holder's release (done on a majority when it returns) frees nothing of
    // the new holder's.
    held.release().await;
    assert!(holders_of(&masters, &next.key(PRODUCT), &taken).await >= next.quorum());
    assert_eq!(taken.ensure_held(), Ok(()));
    taken.release().await;
}

/// How many masters hold `key` under `locks`' token.
async fn holders_of(
    masters: &[PrivateRedis],
    key: &str,
    locks: &inventory_service::stock::lock::Locks,
) -> usize {
    let mut holding = 0;
    for master in masters {
        let mut conn = master.connection().await;
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("GET");
        holding += usize::from(value.as_deref() == locks.tokens().next());
    }
    holding
}

/// Each key of a batch may be won on a majority of its own; renewals count key by key.
#[tokio::test]
async fn a_batch_whose_keys_were_won_on_different_majorities_keeps_them_through_renewals() {
    let masters = three_masters().await;
    let lock = redlock(&masters, &redis_prefix(), options(600, 1_000, true));
    let (first, second) = (ProductId(1), ProductId(2));
    // Another holder's leftovers: the first product on the third master, the second on the
    // first: the batch wins the first on masters 1 and 2, the second on masters 2 and 3.
    for (master, key) in [
        (&masters[2], lock.key(first)),
        (&masters[0], lock.key(second)),
    ] {
        let mut conn = master.connection().await;
        let () = redis::cmd("SET")
            .arg(key)
            .arg("another")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
    let partial = lock.try_acquire_many(&[first, second]).await;
    assert!(
        partial.busy.is_empty(),
        "each on a majority: {:?}",
        partial.busy
    );
    // Several renewals (every 200 ms) later, both are still held.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(partial.locks.ensure_held(), Ok(()));
    partial.locks.release().await;
}

testkit::on_each_backend!(
    #[tokio::test]
    a_redlock_holder_stalled_past_its_validity_cannot_oversell,
);

async fn a_redlock_holder_stalled_past_its_validity_cannot_oversell(backend: Backend) {
    let masters = three_masters().await;
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let prefix = redis_prefix();
    let stalling = redlock(&masters, &prefix, options(300, 10_000, false));
    let other_process = redlock(&masters, &prefix, options(300, 10_000, true));
    a_stalled_holder_cannot_oversell(&app, &Locker::new(stalling), &Locker::new(other_process))
        .await;
}

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    two_instances_on_redlock_with_a_master_frozen_mid_sale_sell_exactly_the_stock,
);

async fn two_instances_on_redlock_with_a_master_frozen_mid_sale_sell_exactly_the_stock(
    backend: Backend,
) {
    let mut masters = three_masters().await;
    let urls: Vec<String> = masters.iter().map(|m| m.url.clone()).collect();
    let prefix = redis_prefix();
    let on_redlock = {
        let (urls, prefix) = (urls.clone(), prefix.clone());
        move |c: &mut inventory_service::Config| {
            c.stock_lock = LockBackend::Redlock;
            c.redlock_urls = urls.clone();
            c.redis_key_prefix = prefix.clone();
            c.redis_timeout = Duration::from_millis(300);
            c.lock_wait = Duration::from_secs(30);
        }
    };
    let (first, second) = TestApp::two_on_one_database(backend, on_redlock).await;
    first.create_product(1, 20).await;

    sixty_deductions_across_a_fault(&first, &second, async { masters[2].freeze() }).await;
    masters[2].resume();
    for app in [&first, &second] {
        let stats = app.deductions.locker().stats();
        assert_eq!(app.deductions.locker().backend(), "redlock");
        assert!(stats.acquired > 0, "{stats:?}");
        assert_eq!(stats.bypassed, 0, "two masters always answered: {stats:?}");
    }
    let metrics = first.metrics().await;
    for series in [
        r#"lock_acquisitions_total{result="acquired",backend="redlock"}"#,
        r#"lock_renewals_total{backend="redlock"}"#,
        r#"lock_wait_seconds_bucket{backend="redlock","#,
    ] {
        assert!(metrics.contains(series), "missing {series}");
    }
}
