//! [`RedisLock`]: the stock lock on one Redis (`STOCK_LOCK=redis`, the default), or on the
//! master a Sentinel deployment names.
//!
//! The lock keeps contention cheap; it is **not** what keeps stock correct. Correctness comes
//! from the database: every stock write is a conditional update (`version = $v AND stock +
//! delta >= 0`, rows changed checked) of what the stock engine decided on the rows as read,
//! for orders' reservations and direct deductions alike. It holds when a lock expires under a
//! paused holder, when Redis loses its keys, or when Redis is down and deductions run without
//! locks at all.
//!
//! How a lock works:
//! - **Queue locally first**: tasks of this process wanting the same product wait in a FIFO
//!   ([`local`]), so only one of them at a time asks Redis and hand-overs have no backoff gap.
//!   A holder that leaves while another local task waits leaves it the key as it is (while
//!   the key is young, at most [`local::MAX_HAND_OVERS`] times in a row), which saves the
//!   next holder the delete and the set: on a hot product, two Redis round trips fewer in
//!   the section every holder waits for.
//! - **Acquire** (`acquire`): `SET <key> <token> NX PX <ttl>` with a fresh random token
//!   (UUID v4) for each key taken from Redis, retried with jittered exponential backoff until
//!   a deadline ([`LockError::Timeout`]). Several products are locked in ascending product
//!   id, each id once, so two deductions never wait on each other in a cycle.
//! - **Fair between processes**: a try that finds the key busy registers its token as the
//!   key's next owner (`<key>:next`, one waiter at a time, kept for [`lease::WAITER_TTL`] and
//!   renewed by every try). A release that finds a waiter registered hands the key straight
//!   to it instead of deleting it, so the releasing process cannot take it back with its next
//!   `SET`. With [`local::MAX_HAND_OVERS`] (N = 32) local hand-overs in a row at most, a
//!   waiter in another process gets a contended lock after at most N + 1 turns of this one.
//! - **Release**: a Lua compare-and-delete (or hand-over to the registered waiter), so a
//!   holder whose lock expired never deletes the lock someone else took since.
//! - **Batches** ([`RedisLock::try_acquire_many`]): the message consumer takes the free locks
//!   of a whole batch's products in one round trip and leaves the busy ones for later.
//! - **Renewal**: while held, a watchdog task renews every key every `ttl / 3` with a Lua
//!   compare-and-`PEXPIRE`. When a renewal finds the key gone or owned by another token, the
//!   lock is *lost*: [`super::Locks::lost`] is cancelled and [`super::Locks::ensure_held`]
//!   fails, which the
//!   holder checks right before commit, then rolls back and retries. `ensure_held` also fails
//!   once the last confirmed expiry has passed, which catches a holder whose whole process was
//!   paused (SIGSTOP) together with its watchdog.
//! - **Redis unreachable** (any Redis error; "busy" is not an error): the caller gets
//!   [`Locks`] that hold nothing ([`Locks::is_bypassed`]) and goes on without the lock. This
//!   is logged once per outage and counted as `lock_acquisitions_total{result="bypassed"}`.
//! - **Redis hung** (it stops answering instead of refusing): one call that times out marks
//!   the process's [`RedisHealth`] down, and from then on acquisitions bypass the lock
//!   without calling Redis at all, until the health check gets an answer again. Otherwise
//!   every deduction would wait out the Redis timeout while holding its product's local
//!   turn, and a hot product would move at one deduction per timeout.
//!
//! A check right before commit cannot close the window between that check and the commit;
//! that window is exactly what the conditional update covers.

mod acquire;
mod batch;
mod held;
mod lease;
mod local;
mod watchdog;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::{RedisCallError, RedisHealth};
use shared::ids::ProductId;
use shared::keys::RedisKeys;

use futures_util::future::BoxFuture;
pub use held::RedisLocks;
pub use lease::{Lease, WAITER_TTL, waiter_key};
pub use local::MAX_HAND_OVERS;

use super::{Counters, LockError, LockOptions, LockStats, Locks, Partial, StockLock};

/// The `backend` label of this lock's metrics, and `STOCK_LOCK`'s value for it.
pub const BACKEND: &str = "redis";

/// The same lock on a Redis Cluster (`REDIS_CLUSTER_URLS`): its label and `STOCK_LOCK` value.
/// A product's key and its waiter key share a hash tag, so every script stays in one slot,
/// and a batch's keys go one call per slot ([`RedisConnection::slot_groups`]).
pub const CLUSTER_BACKEND: &str = "redis-cluster";

/// The `backend` label of a lock on `redis`.
fn backend_of(redis: &RedisConnection) -> &'static str {
    if redis.is_cluster() {
        CLUSTER_BACKEND
    } else {
        BACKEND
    }
}

/// Takes per-product locks in Redis. Cheap to clone; one per process.
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<LockerInner>,
}

struct LockerInner {
    redis: RedisConnection,
    keys: RedisKeys,
    options: LockOptions,
    /// Whether Redis is known down, shared with the rest of the process.
    health: RedisHealth,
    /// Set while deductions bypass the lock, so that is logged once per outage, not once
    /// per request.
    redis_down: AtomicBool,
    local: local::LocalQueues,
    counters: Counters,
    /// [`BACKEND`] or [`CLUSTER_BACKEND`], as the connection is.
    backend: &'static str,
}

impl std::fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLock")
            .field("options", &self.inner.options)
            .field("redis_down", &self.inner.redis_down.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RedisLock {
    /// A lock on `redis`; `health` is the process's view of whether Redis is down, kept
    /// current by [`RedisHealth::watch`].
    pub fn new(
        redis: RedisConnection,
        keys: RedisKeys,
        options: LockOptions,
        health: RedisHealth,
    ) -> Self {
        let backend = backend_of(&redis);
        Self {
            inner: Arc::new(LockerInner {
                redis,
                keys,
                options,
                health,
                redis_down: AtomicBool::new(false),
                local: local::LocalQueues::default(),
                counters: Counters::new(backend),
                backend,
            }),
        }
    }

    pub fn options(&self) -> LockOptions {
        self.inner.options
    }

    /// What this locker did so far.
    pub fn stats(&self) -> LockStats {
        self.inner.counters.stats()
    }

    fn timed_out(&self, started: Instant) -> LockError {
        self.inner.counters.timed_out(started.elapsed());
        LockError::Timeout(self.inner.options.wait)
    }

    /// The Redis key of `product`'s lock.
    pub fn key(&self, product: ProductId) -> String {
        self.inner.keys.product_lock(product)
    }

    /// Locks one product; see [`RedisLock::acquire_all`].
    pub async fn acquire(&self, product: ProductId) -> Result<Locks, LockError> {
        self.acquire_all(&[product]).await
    }

    /// Locks every product of `products` (duplicates ignored), in ascending product id.
    ///
    /// Gives up with [`LockError::Timeout`] (releasing what it took) when some lock stays
    /// busy past the deadline. When Redis fails, returns [`Locks`] that hold nothing
    /// ([`Locks::is_bypassed`]): the caller proceeds and relies on the conditional update.
    pub async fn acquire_all(&self, products: &[ProductId]) -> Result<Locks, LockError> {
        let ids = sorted_unique(products);
        let started = Instant::now();
        let deadline = started + self.inner.options.wait;
        let Some(turns) = self.inner.local.enter(&ids, deadline).await else {
            return Err(self.timed_out(started));
        };
        self.take_keys(ids, turns, started, deadline).await
    }

    /// Locks that hold nothing, after `error`; a failed call (not one skipped because Redis
    /// was known down) is counted.
    fn bypass(&self, error: &RedisCallError) -> RedisLocks {
        if !self.inner.redis_down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                %error,
                "Redis is unreachable: deducting stock without locks until it is back \
                 (the conditional update keeps stock correct)"
            );
        }
        self.inner
            .counters
            .bypassed(matches!(error, RedisCallError::Failed(_)));
        RedisLocks::bypassed()
    }
}

impl StockLock for RedisLock {
    fn acquire_all<'a>(
        &'a self,
        products: &'a [ProductId],
    ) -> BoxFuture<'a, Result<Locks, LockError>> {
        Box::pin(RedisLock::acquire_all(self, products))
    }

    fn try_acquire_many<'a>(&'a self, products: &'a [ProductId]) -> BoxFuture<'a, Partial> {
        Box::pin(RedisLock::try_acquire_many(self, products))
    }

    fn options(&self) -> LockOptions {
        RedisLock::options(self)
    }

    fn stats(&self) -> LockStats {
        RedisLock::stats(self)
    }

    fn backend(&self) -> &'static str {
        self.inner.backend
    }
}

fn sorted_unique(products: &[ProductId]) -> Vec<ProductId> {
    let mut ids = products.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}
