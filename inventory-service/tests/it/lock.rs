//! The Redis lock on its own: exclusion, ownership, expiry, renewal, loss, ordering, bypass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use inventory_service::stock::lock::{Lease, LockError, LockOptions, RedisLock};
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::RedisHealth;
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use testkit::{redis_prefix, redis_url};

use crate::helpers::eventually;

fn options(ttl_ms: u64, wait_ms: u64, renew: bool) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        renew,
    }
}

fn redis() -> RedisConnection {
    testkit::init_logs();
    platform::storage::redis::connect(&redis_url()).expect("a Redis manager")
}

fn locker(options: LockOptions) -> RedisLock {
    locker_with_prefix(&redis_prefix(), options)
}

/// Lockers sharing a prefix play separate processes contending for the same keys in Redis.
fn locker_with_prefix(prefix: &str, options: LockOptions) -> RedisLock {
    RedisLock::new(
        redis(),
        RedisKeys::new(prefix),
        options,
        RedisHealth::default(),
    )
}

async fn holder_of(conn: &mut RedisConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_one_of_twenty_tasks_holds_a_products_lock_at_a_time() {
    // Five "processes" (lockers of their own, one Redis key space) with four tasks each:
    // tasks of one process queue locally, processes exclude each other through Redis.
    let prefix = redis_prefix();
    let lockers: Vec<_> = (0..5)
        .map(|_| locker_with_prefix(&prefix, options(10_000, 30_000, true)))
        .collect();
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let most_inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..20 {
        let (locker, counter, inside, most_inside) = (
            lockers[task % lockers.len()].clone(),
            counter.clone(),
            inside.clone(),
            most_inside.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let locks = locker.acquire(ProductId(1)).await.expect("the lock");
            assert!(!locks.is_bypassed());
            let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most_inside.fetch_max(now_inside, Ordering::SeqCst);
            // A read-modify-write that loses updates unless the lock excludes the others;
            // the pause in the middle gives any overlap the chance to show.
            let seen = counter.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            counter.store(seen + 1, Ordering::SeqCst);
            inside.fetch_sub(1, Ordering::SeqCst);
            locks.release().await;
        }));
    }
    for task in tasks {
        task.await.expect("the task finishes");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 20);
    assert_eq!(most_inside.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_non_owner_can_neither_release_nor_renew_the_lock() {
    let locker = locker(options(5_000, 1_000, false));
    let mut conn = redis();
    let locks = locker.acquire(ProductId(7)).await.expect("the lock");
    let key = locker.key(ProductId(7));
    let token = locks.tokens().next().expect("one token").to_owned();

    let intruder = Lease::new(key.clone());
    assert!(!intruder.release(&mut conn).await.expect("release runs"));
    assert!(
        !intruder
            .renew(&mut conn, Duration::from_secs(60))
            .await
            .expect("renew runs")
    );
    assert_eq!(
        holder_of(&mut conn, &key).await.as_deref(),
        Some(token.as_str())
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        pttl > 0 && pttl <= 5_000,
        "the intruder's renewal did not extend it: {pttl}"
    );

    locks.release().await;
    assert_eq!(holder_of(&mut conn, &key).await, None);
}

#[tokio::test]
async fn an_expired_lock_is_taken_by_the_next_holder_and_the_old_one_cannot_free_it() {
    let locker = locker(options(5_000, 10_000, false));
    let mut conn = redis();
    let key = locker.key(ProductId(3));
    // A holder that crashed: it took the key for a short TTL and will never release it.
    let crashed = Lease::new(key.clone());
    assert!(
        crashed
            .try_acquire(&mut conn, Duration::from_millis(200))
            .await
            .expect("SET")
    );

    let locks = locker
        .acquire(ProductId(3))
        .await
        .expect("the lock, once expired");
    let token = locks.tokens().next().expect("one token").to_owned();
    assert_eq!(
        holder_of(&mut conn, &key).await.as_deref(),
        Some(token.as_str())
    );
    assert!(!crashed.release(&mut conn).await.expect("release runs"));
    assert_eq!(
        holder_of(&mut conn, &key).await.as_deref(),
        Some(token.as_str())
    );
    locks.release().await;
}

#[tokio::test]
async fn renewal_keeps_a_slow_holders_lock_past_its_ttl() {
    // Renewed every ttl / 3: a renewal may run up to two thirds of a TTL late before the key
    // expires, slack enough for a loaded machine.
    let ttl = Duration::from_millis(2_000);
    let locker = locker(LockOptions {
        ttl,
        wait: Duration::from_millis(100),
        renew: true,
    });
    let mut conn = redis();
    let locks = locker.acquire(ProductId(9)).await.expect("the lock");
    let token = locks.tokens().next().expect("one token").to_owned();
    let key = locker.key(ProductId(9));

    // The holder works for two and a half TTLs; the watchdog has to keep the key alive.
    let started = Instant::now();
    while started.elapsed() < ttl * 5 / 2 {
        tokio::time::sleep(ttl / 4).await;
        assert_eq!(
            holder_of(&mut conn, &key).await.as_deref(),
            Some(token.as_str())
        );
    }
    assert_eq!(locks.ensure_held(), Ok(()));
    assert!(matches!(
        locker.acquire(ProductId(9)).await,
        Err(LockError::Timeout(_))
    ));
    locks.release().await;
}

#[tokio::test]
async fn a_lock_deleted_behind_the_holders_back_is_reported_as_lost() {
    let locker = locker(options(300, 1_000, true));
    let mut conn = redis();
    let locks = locker.acquire(ProductId(4)).await.expect("the lock");
    let lost = locks.lost();
    let _: i64 = redis::cmd("DEL")
        .arg(locker.key(ProductId(4)))
        .query_async(&mut conn)
        .await
        .expect("DEL");

    tokio::time::timeout(Duration::from_secs(10), lost.cancelled())
        .await
        .expect("the watchdog reports the loss");
    assert_eq!(locks.ensure_held(), Err(LockError::Lost));
    locks.release().await;
}

#[tokio::test]
async fn a_holder_without_renewal_learns_before_commit_that_its_lock_expired() {
    let locker = locker(options(200, 1_000, false));
    let conn = redis();
    let locks = locker.acquire(ProductId(5)).await.expect("the lock");
    assert_eq!(locks.ensure_held(), Ok(()));
    let key = locker.key(ProductId(5));
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move { holder_of(&mut conn, &key).await.is_none().then_some(()) }
    })
    .await;
    assert_eq!(locks.ensure_held(), Err(LockError::Lost));
}

#[tokio::test]
async fn several_products_are_locked_once_each_in_ascending_order() {
    let locker = locker(options(5_000, 1_000, true));
    let ids = [ProductId(30), ProductId(10), ProductId(30), ProductId(20)];
    let locks = locker.acquire_all(&ids).await.expect("the locks");
    let keys: Vec<&str> = locks.keys().collect();
    let expected: Vec<String> = [10, 20, 30].map(|id| locker.key(ProductId(id))).to_vec();
    assert_eq!(keys, expected);
    locks.release().await;
}

#[tokio::test]
async fn a_busy_lock_times_out_and_releases_what_it_had_taken() {
    let prefix = redis_prefix();
    let other_process = locker_with_prefix(&prefix, options(5_000, 200, true));
    let locker = locker_with_prefix(&prefix, options(5_000, 200, true));
    let holder = other_process.acquire(ProductId(2)).await.expect("the lock");
    let waiter = locker.acquire_all(&[ProductId(1), ProductId(2)]).await;
    assert!(matches!(waiter, Err(LockError::Timeout(_))), "{waiter:?}");
    // Product 1, taken before the wait on product 2, was given back.
    let one = other_process
        .acquire(ProductId(1))
        .await
        .expect("product 1 is free in Redis too");
    one.release().await;
    holder.release().await;
}

#[tokio::test]
async fn with_redis_unreachable_the_lock_is_bypassed_not_failed() {
    let unreachable =
        platform::storage::redis::connect("redis://127.0.0.1:1/0").expect("a manager");
    let locker = RedisLock::new(
        unreachable,
        RedisKeys::new(redis_prefix()),
        options(1_000, 1_000, true),
        RedisHealth::default(),
    );
    for _ in 0..3 {
        let locks = locker
            .acquire_all(&[ProductId(1), ProductId(2)])
            .await
            .expect("bypassed");
        assert!(locks.is_bypassed());
        assert_eq!(locks.ensure_held(), Ok(()));
        locks.release().await;
    }
}

#[tokio::test]
async fn a_holder_leaves_its_key_to_the_next_local_holder_and_the_last_one_deletes_it() {
    let locker = locker(options(10_000, 5_000, true));
    let mut conn = redis();
    let key = locker.key(ProductId(9));
    let first = locker.acquire(ProductId(9)).await.expect("the lock");
    let token = first.tokens().next().expect("one token").to_owned();

    let next = tokio::spawn({
        let locker = locker.clone();
        async move { locker.acquire(ProductId(9)).await.expect("the lock") }
    });
    // The second task queues behind the first before the first lets go (on this
    // single-threaded test runtime it runs as soon as this task sleeps).
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.release().await;
    let second = next.await.expect("the task finishes");
    assert_eq!(
        second.tokens().next(),
        Some(token.as_str()),
        "the waiting holder got the key as it was, without deleting and setting it again"
    );
    assert_eq!(
        holder_of(&mut conn, &key).await.as_deref(),
        Some(token.as_str())
    );
    assert!(second.ensure_held().is_ok());

    // Nobody waits now: the key is deleted, and the next holder sets a new one.
    second.release().await;
    assert_eq!(holder_of(&mut conn, &key).await, None);
    let third = locker.acquire(ProductId(9)).await.expect("the lock");
    assert_ne!(third.tokens().next(), Some(token.as_str()));
    third.release().await;
}

#[tokio::test]
async fn a_key_is_set_afresh_after_a_run_of_hand_overs() {
    let locker = locker(options(10_000, 5_000, true));
    let mut held = locker.acquire(ProductId(11)).await.expect("the lock");
    let mut tokens = vec![held.tokens().next().expect("a token").to_owned()];
    for _ in 0..40 {
        let next = tokio::spawn({
            let locker = locker.clone();
            async move { locker.acquire(ProductId(11)).await.expect("the lock") }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        held.release().await;
        held = next.await.expect("the task finishes");
        tokens.push(held.tokens().next().expect("a token").to_owned());
    }
    held.release().await;
    tokens.dedup();
    assert!(
        tokens.len() >= 2,
        "41 holders in a row cannot all have used one key: {}",
        tokens.len()
    );
    assert!(
        tokens.len() < 41,
        "a waiting holder reuses the key it was left"
    );
}

#[tokio::test]
async fn a_waiter_in_another_process_gets_the_lock_within_the_hand_over_limit() {
    // Two lockers on one prefix: two processes with their own local queues.
    let prefix = redis_prefix();
    let here = locker_with_prefix(&prefix, options(10_000, 30_000, true));
    let there = locker_with_prefix(&prefix, options(10_000, 30_000, true));
    let product = ProductId(21);
    let conn = redis();
    let turns = Arc::new(std::sync::Mutex::new(Vec::<char>::new()));
    let take_turn = |turns: &Arc<std::sync::Mutex<Vec<char>>>, who: char| {
        turns.lock().expect("the turns").push(who);
    };

    let first = here.acquire(product).await.expect("the lock");
    take_turn(&turns, 'A');
    let remote = tokio::spawn({
        let (there, turns) = (there.clone(), turns.clone());
        async move {
            let locks = there.acquire(product).await.expect("the remote turn");
            turns.lock().expect("the turns").push('B');
            locks.release().await;
        }
    });
    // The other process is waiting (registered as the next owner) before this one starts
    // taking turn after turn.
    let waiting = inventory_service::stock::lock::waiter_key(&here.key(product));
    eventually(Duration::from_secs(10), || {
        let (mut conn, key) = (conn.clone(), waiting.clone());
        async move { holder_of(&mut conn, &key).await.map(drop) }
    })
    .await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let local: Vec<_> = (0..3)
        .map(|_| {
            let (here, turns, stop) = (here.clone(), turns.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let locks = here.acquire(product).await.expect("a local turn");
                    turns.lock().expect("the turns").push('A');
                    tokio::task::yield_now().await;
                    locks.release().await;
                }
            })
        })
        .collect();
    // Let the local tasks queue behind the first holder.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    first.release().await;
    remote.await.expect("the remote waiter gets its turn");
    stop.store(true, Ordering::SeqCst);
    for task in local {
        task.await.expect("a local task ends");
    }

    let turns = turns.lock().expect("the turns").clone();
    let before_remote = turns.iter().take_while(|who| **who == 'A').count();
    let limit = inventory_service::stock::lock::MAX_HAND_OVERS as usize + 1;
    assert!(
        before_remote <= limit,
        "{before_remote} local turns before the remote waiter's, at most {limit}"
    );
}
