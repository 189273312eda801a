//! The stock lock: one interface ([`StockLock`]), chosen once at start (`STOCK_LOCK`), and what
//! its holders get back ([`Locks`]). The implementations: one Redis or a Redis Cluster
//! ([`redis`], the default), Redlock over independent Redis masters ([`redlock`]), keys under a lease on an etcd cluster
//! ([`etcd`]) and the database's own row locks ([`database`]); another lock service is one more module beside them, implementing the same
//! two traits.
//!
//! A lock keeps contention cheap; it is **not** what keeps stock correct. Every stock write
//! is a conditional update (the version read, `stock + delta >= 0`) of what the stock engine
//! decided, so stock stays correct when a lock expires under a paused holder, when the lock
//! service loses its keys, or when it is down and batches run without locks at all
//! ([`Locks::is_bypassed`]). What every implementation owes its holders:
//! - products locked in ascending id, each once, so two holders never wait in a cycle;
//! - a deadline for waiting ([`LockError::Timeout`]), and busy products reported rather than
//!   waited for in [`StockLock::try_acquire_many`];
//! - the lock kept alive while held (renewal, a lease's keep-alive), and a lock found lost
//!   reported through [`Locks::lost`] and [`Locks::ensure_held`], which the holder checks
//!   right before commit and then rolls back;
//! - when the lock service cannot be reached, locks that hold nothing instead of an error.

mod counters;
pub mod database;
pub mod etcd;
pub mod redis;
pub mod redlock;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use shared::ids::ProductId;
use tokio_util::sync::CancellationToken;

pub use counters::Counters;
pub use redis::{Lease, MAX_HAND_OVERS, RedisLock, WAITER_TTL, waiter_key};

/// The lock services `STOCK_LOCK` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// One Redis, or the master its Sentinels name (`REDIS_URL`): [`redis::RedisLock`].
    #[default]
    Redis,
    /// The same lock on a Redis Cluster (`REDIS_CLUSTER_URLS`).
    RedisCluster,
    /// A majority of independent Redis masters (`REDLOCK_URLS`): [`redlock::Redlock`].
    Redlock,
    /// Keys under the instance's lease on an etcd cluster (`ETCD_ENDPOINTS`): [`etcd::EtcdLock`].
    Etcd,
    /// No lock service: the rows of the service's own database ([`database::RowLock`]).
    Database,
}

impl Backend {
    pub const ALL: [Self; 5] = [
        Self::Redis,
        Self::RedisCluster,
        Self::Redlock,
        Self::Etcd,
        Self::Database,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Redis => redis::BACKEND,
            Self::RedisCluster => redis::CLUSTER_BACKEND,
            Self::Redlock => redlock::BACKEND,
            Self::Etcd => etcd::BACKEND,
            Self::Database => database::BACKEND,
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|backend| backend.as_str() == value.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|b| b.as_str()).collect();
                format!("not one of {}", names.join(", "))
            })
    }
}

/// How locks are taken and kept.
#[derive(Debug, Clone, Copy)]
pub struct LockOptions {
    /// Time to live of every lock (a key's, a lease's).
    pub ttl: Duration,
    /// How long [`StockLock::acquire_all`] keeps trying before [`LockError::Timeout`].
    pub wait: Duration,
    /// Whether held locks are kept alive (renewed every `ttl / 3`). Always on in the service;
    /// tests turn it off to play a holder that stalls past its TTL.
    pub renew: bool,
}

/// Why locks could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Another holder kept a lock for the whole acquisition deadline.
    #[error("the stock locks were not free within {0:?}")]
    Timeout(Duration),
    /// A held lock expired or was taken over; roll back and try again.
    #[error("a stock lock expired or was taken over before commit")]
    Lost,
}

/// What one lock did since it was made: the process-wide metrics, but of this lock alone
/// (tests read these, since the metrics are shared by every test of a binary).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LockStats {
    pub acquired: u64,
    pub timeouts: u64,
    pub bypassed: u64,
    /// Acquisitions whose call to the lock service failed (then bypassed); calls skipped
    /// because it was already known down are not among them.
    pub service_failures: u64,
}

/// A way to lock products across processes.
pub trait StockLock: Send + Sync + 'static {
    /// Locks every product of `products` (duplicates ignored), in ascending product id;
    /// [`LockError::Timeout`] (releasing what it took) when one stays busy past the
    /// deadline, locks that hold nothing when the lock service fails.
    fn acquire_all<'a>(
        &'a self,
        products: &'a [ProductId],
    ) -> BoxFuture<'a, Result<Locks, LockError>>;

    /// Takes every free lock among `products` at once and reports the busy ones instead of
    /// waiting for them: a batch goes on with what it could lock.
    fn try_acquire_many<'a>(&'a self, products: &'a [ProductId]) -> BoxFuture<'a, Partial>;

    fn options(&self) -> LockOptions;

    fn stats(&self) -> LockStats;

    /// What `STOCK_LOCK` names it, and its metrics' `backend` label.
    fn backend(&self) -> &'static str;
}

/// What a holder of some locks has, as one implementation keeps it.
pub trait Held: Send + Sync {
    /// `true` when the lock service was unreachable and nothing is locked.
    fn is_bypassed(&self) -> bool;
    /// The names of the locks held (keys), in the order they were taken.
    fn keys(&self) -> Vec<&str>;
    /// What tells this holder's locks from any other's (a random token, a revision), one
    /// per key, in the order of [`Held::keys`]; none when the lock is the holder's own
    /// transaction's (the database's row locks).
    fn tokens(&self) -> Vec<&str>;
    /// Cancelled as soon as a lock is found lost.
    fn lost(&self) -> CancellationToken;
    /// `Err(Lost)` when a lock was lost or may have expired; always `Ok` when bypassed.
    fn ensure_held(&self) -> Result<(), LockError>;
    /// Stops keeping the locks alive and frees them (best effort: a lock that cannot be
    /// freed expires by itself).
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Locks held by one holder (or, when bypassed, none). Release them with [`Locks::release`];
/// dropping them frees them too, in the background.
pub struct Locks(Box<dyn Held>);

impl Locks {
    pub fn new(held: impl Held + 'static) -> Self {
        Self(Box::new(held))
    }

    /// `true` when the lock service was unreachable and nothing is locked.
    pub fn is_bypassed(&self) -> bool {
        self.0.is_bypassed()
    }

    /// The names of the locks held, in the order they were taken.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().into_iter()
    }

    /// One token per key, in the order of [`Locks::keys`].
    pub fn tokens(&self) -> impl Iterator<Item = &str> {
        self.0.tokens().into_iter()
    }

    /// Cancelled as soon as a lock is found lost; lets a long holder stop early.
    pub fn lost(&self) -> CancellationToken {
        self.0.lost()
    }

    /// Call right before commit: `Err(Lost)` when a lock was lost or may have expired. Then
    /// roll back and start over. Always `Ok` when bypassed.
    pub fn ensure_held(&self) -> Result<(), LockError> {
        self.0.ensure_held()
    }

    pub async fn release(self) {
        self.0.release().await;
    }
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locks")
            .field("keys", &self.0.keys())
            .field("bypassed", &self.is_bypassed())
            .field("lost", &self.lost().is_cancelled())
            .finish()
    }
}

/// The locks a batch could take, and the products it could not.
#[derive(Debug)]
pub struct Partial {
    /// Held (or bypassed, when the lock service is down): release them after commit.
    pub locks: Locks,
    /// Busy products, ascending: their work waits for a later batch.
    pub busy: Vec<ProductId>,
}

/// The process's stock lock, whichever implementation start-up chose. Cheap to clone.
#[derive(Clone)]
pub struct Locker(Arc<dyn StockLock>);

impl Locker {
    pub fn new(lock: impl StockLock) -> Self {
        Self(Arc::new(lock))
    }

    /// Locks one product; see [`StockLock::acquire_all`].
    pub async fn acquire(&self, product: ProductId) -> Result<Locks, LockError> {
        self.0.acquire_all(&[product]).await
    }

    pub async fn acquire_all(&self, products: &[ProductId]) -> Result<Locks, LockError> {
        self.0.acquire_all(products).await
    }

    pub async fn try_acquire_many(&self, products: &[ProductId]) -> Partial {
        self.0.try_acquire_many(products).await
    }

    pub fn options(&self) -> LockOptions {
        self.0.options()
    }

    /// What this lock did so far.
    pub fn stats(&self) -> LockStats {
        self.0.stats()
    }

    pub fn backend(&self) -> &'static str {
        self.0.backend()
    }
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend())
            .field("options", &self.options())
            .finish_non_exhaustive()
    }
}

impl<L: StockLock> From<L> for Locker {
    fn from(lock: L) -> Self {
        Self::new(lock)
    }
}
