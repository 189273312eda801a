//! [`EtcdLock`]: the stock lock on an etcd cluster (`STOCK_LOCK=etcd`, `ETCD_ENDPOINTS`). A
//! product's lock is a key that exists under the instance's lease ([`lease`]); taking it is a
//! transaction that creates the key only if it does not exist, freeing it one that deletes the
//! key only if it still holds the holder's token. etcd replicates every write through Raft, so
//! a lock taken survives the loss of any minority of the members, its leader included.
//!
//! - **Acquire** ([`EtcdLock::acquire_all`]): one transaction puts all of a batch's keys or
//!   none; a busy batch tries again after a jittered pause, until `LOCK_WAIT_MS`.
//! - **Batches** ([`EtcdLock::try_acquire_many`]): one transaction of one nested transaction
//!   per key, each taking its key if it is free; the busy ones are reported.
//! - **Large batches**: etcd refuses a transaction of more than 128 operations a branch
//!   (`--max-txn-ops`), nested ones counted against their parent's, so keys go
//!   [`MAX_KEYS_PER_TXN`] to a transaction ([`MAX_KEYS_PER_NESTED_TXN`] when each has its own
//!   nested one), in ascending product id; an all-or-nothing acquisition then holds the first chunks while it waits for the
//!   next, which cannot deadlock since every holder goes in the same order.
//! - **Lost answers**: a try that timed out may have committed. Its keys hold the holder's
//!   token, so a retry reads them back and counts them taken ([`txn::taken_whole`]), and an
//!   acquisition that ends without handing its locks over frees every key holding its token
//!   ([`Attempt`]): a key left behind would stay busy as long as the lease is kept alive.
//! - **Nothing left behind**: a key whose release failed, or whose `take` committed after its
//!   acquisition had moved on, would stay busy under the kept-alive lease; once a TTL the
//!   [`sweep`] frees every key under the lease whose token no acquisition or holder wants.
//! - **Fencing tokens**: every key taken in one transaction carries that transaction's
//!   revision, which etcd only ever increases; it is each key's token ([`super::Locks::tokens`])
//!   and is logged. The conditional update's version check is what fences the stock rows.
//! - **Kept alive and lost**: the lease's keep-alive is the renewal of every lock under it; a
//!   lease that lapses is every such lock lost ([`super::Locks::ensure_held`] fails before
//!   commit).
//! - **Unreachable**: without a live lease, or when a call fails, the holder gets locks that
//!   hold nothing, as with one Redis down: the conditional update decides.

mod batch;
mod held;
mod lease;
mod members;
mod release;
mod sweep;
mod txn;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Txn;
use futures_util::future::BoxFuture;
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use tokio_util::sync::{CancellationToken, DropGuard};
use uuid::Uuid;

use self::held::EtcdHeld;
use self::lease::{Epoch, Keeping, Lease};
use self::members::Members;
use self::release::Attempt;
use self::sweep::Tokens;
use self::txn::{take, taken_whole};
use super::{Counters, LockError, LockOptions, LockStats, Locks, Partial, StockLock};

/// The `backend` label of this lock's metrics, and `STOCK_LOCK`'s value for it.
pub const BACKEND: &str = "etcd";

/// Keys per transaction: etcd's default `--max-txn-ops` (128 operations a branch).
pub const MAX_KEYS_PER_TXN: usize = 128;

/// Keys per transaction of one nested transaction per key: etcd counts a nested
/// transaction's operations against what its parent's branch left of the same 128.
pub const MAX_KEYS_PER_NESTED_TXN: usize = MAX_KEYS_PER_TXN / 2;

/// First and largest pause between two tries of a busy lock (full jitter in between).
const BACKOFF_BASE: Duration = Duration::from_millis(2);
const BACKOFF_CAP: Duration = Duration::from_millis(50);

/// The longest one call to etcd may take before etcd counts as unreachable for it.
const CALL_TIMEOUT_CAP: Duration = Duration::from_secs(1);

/// Takes per-product locks on an etcd cluster. Cheap to clone.
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

struct Inner {
    members: Arc<Members>,
    keys: RedisKeys,
    options: LockOptions,
    lease: Arc<Lease>,
    /// The tokens whose keys are wanted; the sweep frees any other key under the lease.
    tokens: Arc<Tokens>,
    /// Set after a failed call, so an outage is logged once.
    unreachable: AtomicBool,
    counters: Counters,
    /// Stops the lease's keeper (and revokes the lease) when the last clone goes.
    _keeper: DropGuard,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl EtcdLock {
    /// A lock on the etcd cluster at `endpoints` (`http://host:port` or `host:port`). Connects
    /// lazily: the service starts while etcd is down, and its lease is granted once etcd
    /// answers. Fails only on an endpoint that is not an address.
    pub async fn connect(
        endpoints: &[String],
        keys: RedisKeys,
        options: LockOptions,
    ) -> anyhow::Result<Self> {
        let call_timeout = (options.ttl / 3).min(CALL_TIMEOUT_CAP);
        let members = Arc::new(Members::connect(endpoints, call_timeout).await?);
        let lease = Arc::new(Lease::default());
        let tokens = Arc::new(Tokens::default());
        let stop = CancellationToken::new();
        tokio::spawn(sweep::sweep(
            members.clone(),
            lease.clone(),
            tokens.clone(),
            options.ttl,
            stop.clone(),
        ));
        tokio::spawn(lease::keep(
            members.clone(),
            lease.clone(),
            Keeping {
                ttl: options.ttl,
                call_timeout,
                renew: options.renew,
            },
            stop.clone(),
        ));
        Ok(Self {
            inner: Arc::new(Inner {
                members,
                keys,
                options,
                lease,
                tokens,
                unreachable: AtomicBool::new(false),
                counters: Counters::new(BACKEND),
                _keeper: stop.drop_guard(),
            }),
        })
    }

    /// The etcd key of `product`'s lock.
    pub fn key(&self, product: ProductId) -> String {
        self.inner.keys.product_lock(product)
    }

    /// The lease new locks go under, while one is live.
    pub fn lease_id(&self) -> Option<i64> {
        self.inner.lease.current().map(|epoch| epoch.id)
    }

    /// `true` while the instance holds a live lease: etcd answers, and a majority of its
    /// members keeps the lease alive. `/readyz` names `etcd` otherwise.
    pub fn answers(&self) -> bool {
        self.inner.lease.current().is_some()
    }

    fn ids_of(products: &[ProductId]) -> Vec<ProductId> {
        let mut ids = products.to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Locks every product of `products` (duplicates ignored), all or none per transaction.
    pub async fn acquire_all(&self, products: &[ProductId]) -> Result<Locks, LockError> {
        let keys: Vec<String> = Self::ids_of(products)
            .into_iter()
            .map(|id| self.key(id))
            .collect();
        let started = Instant::now();
        let deadline = started + self.inner.options.wait;
        let token = Uuid::new_v4().to_string();
        let Some(epoch) = self.inner.lease.current() else {
            return Ok(self.bypass(None));
        };
        self.inner.tokens.begin(&token);
        // Frees every key of the acquisition that holds its token on any way out but success,
        // this future's drop included: a call that failed or was abandoned may have committed.
        let attempt_guard = Attempt::new(self, &keys, &token);
        let mut taken = Vec::with_capacity(keys.len());
        let mut attempt = 0;
        for chunk in keys.chunks(MAX_KEYS_PER_TXN) {
            loop {
                match self.call(take(chunk, &token, epoch.id)).await {
                    Ok(answer) => {
                        if let Some(revisions) = taken_whole(&answer, &token) {
                            taken.extend(chunk.iter().cloned().zip(revisions));
                            break;
                        }
                    }
                    Err(error) => return Ok(self.bypass(Some(error))),
                }
                // Busy. A lease that lapsed meanwhile took what was held with it.
                let now = Instant::now();
                if now >= deadline || !epoch.is_live() {
                    self.inner.counters.timed_out(started.elapsed());
                    return Err(LockError::Timeout(self.inner.options.wait));
                }
                let pause = platform::retry::backoff(attempt, BACKOFF_BASE, BACKOFF_CAP)
                    .min(deadline - now);
                attempt += 1;
                tokio::time::sleep(pause).await;
            }
        }
        attempt_guard.disarm();
        Ok(self.held(taken, token, epoch, started))
    }

    fn held(
        &self,
        taken: Vec<(String, i64)>,
        token: String,
        epoch: Arc<Epoch>,
        started: Instant,
    ) -> Locks {
        if self.inner.unreachable.swap(false, Ordering::Relaxed) {
            tracing::info!("etcd answers again: stock locks are taken again");
        }
        self.inner.counters.acquired(started.elapsed());
        tracing::debug!(
            lease = epoch.id,
            keys = ?taken,
            "etcd stock locks taken; each key's revision is its fencing token"
        );
        Locks::new(EtcdHeld::held(self.clone(), taken, token, epoch))
    }

    /// Locks that hold nothing: etcd has no live lease for this instance, or a call failed.
    fn bypass(&self, error: Option<etcd_client::Error>) -> Locks {
        self.inner.counters.bypassed(error.is_some());
        if let Some(error) = error
            && !self.inner.unreachable.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                %error,
                "etcd does not answer: deducting stock without locks until it does (the \
                 conditional update keeps stock correct)"
            );
        }
        Locks::new(EtcdHeld::bypassed())
    }

    async fn call(&self, txn: Txn) -> Result<etcd_client::TxnResponse, etcd_client::Error> {
        self.inner
            .members
            .call(|mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .await
    }
}

impl StockLock for EtcdLock {
    fn acquire_all<'a>(
        &'a self,
        products: &'a [ProductId],
    ) -> BoxFuture<'a, Result<Locks, LockError>> {
        Box::pin(EtcdLock::acquire_all(self, products))
    }

    fn try_acquire_many<'a>(&'a self, products: &'a [ProductId]) -> BoxFuture<'a, Partial> {
        Box::pin(EtcdLock::try_acquire_many(self, products))
    }

    fn options(&self) -> LockOptions {
        self.inner.options
    }

    fn stats(&self) -> LockStats {
        self.inner.counters.stats()
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }
}
