//! [`Redlock`]: the stock lock over several independent Redis masters (`STOCK_LOCK=redlock`,
//! `REDLOCK_URLS`), by the Redlock algorithm: a lock is held when a majority of the masters
//! took it for the holder's random token, and only for its validity, the TTL less the time
//! spent taking it and an allowance for clock drift (`REDLOCK_DRIFT_MS` plus 1 % of the
//! TTL). A minority of masters down, or slow, changes nothing.
//!
//! - **Acquire** ([`Redlock::acquire_all`]): every master is asked at once to take all of the
//!   batch's keys or none ([`scripts`]); a majority that took them within the validity holds
//!   the lock. Otherwise every master is asked to free what it took, and the try starts again
//!   after a jittered pause, until `LOCK_WAIT_MS`.
//! - **Batches** ([`Redlock::try_acquire_many`]): one round; each key held by a majority is
//!   the batch's, the others are freed everywhere and reported busy.
//! - **Renewal**: every `ttl / 3` the watchdog asks every master to extend all of the holder's
//!   keys that still hold its token; a majority extends the validity. Once a majority can no
//!   longer be reached (keys gone or taken on too many masters), or the validity ran out
//!   without a majority renewing, the lock is lost ([`super::Locks::ensure_held`] fails before
//!   commit).
//! - **Unreachable**: when fewer than a majority of the masters answer at all, the holder gets
//!   locks that hold nothing, as with one Redis down: the conditional update decides.
//!
//! No local queue and no hand-over: a deductions leader already serialises its product set
//! within the process, and every holder takes its keys afresh. The order-events consumer's
//! one try per batch can therefore find a product busy for as long as a stream of direct
//! deductions lasts on it; its events wait for a later batch meanwhile (the Redis lock's
//! local queue gives it a turn instead).
//!
//! Redlock's exclusion assumes a master keeps its keys across a restart (AOF with `fsync`), or
//! stays down for a TTL before it comes back empty; otherwise two holders can overlap for up
//! to a TTL. Stock stays correct regardless: the conditional update decides.

mod batch;
mod fanout;
mod held;
mod masters;
mod scripts;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use platform::storage::redis::RedisConnection;
use shared::ids::ProductId;
use shared::keys::RedisKeys;
use uuid::Uuid;

use self::fanout::Round;
use self::held::RedlockHeld;
use self::masters::Majority;
use super::{Counters, LockError, LockOptions, LockStats, Locks, Partial, StockLock};

/// The `backend` label of this lock's metrics, and `STOCK_LOCK`'s value for it.
pub const BACKEND: &str = "redlock";

/// The fewest masters Redlock runs on: with fewer, one master's loss loses every lock.
pub const MIN_MASTERS: usize = 3;

/// First and largest pause between two tries of a busy lock (full jitter in between).
const BACKOFF_BASE: Duration = Duration::from_millis(2);
const BACKOFF_CAP: Duration = Duration::from_millis(50);

/// Takes per-product locks on a majority of independent Redis masters. Cheap to clone.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    masters: Vec<RedisConnection>,
    keys: RedisKeys,
    options: LockOptions,
    /// The fixed part of the drift allowance (`REDLOCK_DRIFT_MS`).
    drift: Duration,
    /// Set while fewer than a majority answer, so that is logged once per outage.
    unreachable: AtomicBool,
    counters: Counters,
    /// Whether a majority answered the last health check, for `/readyz`.
    majority: Arc<Majority>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("masters", &self.inner.masters.len())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A lock over `masters` (at least [`MIN_MASTERS`]; start-up checks `REDLOCK_URLS`).
    pub fn new(
        masters: Vec<RedisConnection>,
        keys: RedisKeys,
        options: LockOptions,
        drift: Duration,
    ) -> Self {
        let majority = Arc::new(Majority::default());
        Majority::watch(&majority, masters.clone(), masters.len() / 2 + 1);
        Self {
            inner: Arc::new(Inner {
                masters,
                keys,
                options,
                drift,
                unreachable: AtomicBool::new(false),
                counters: Counters::new(BACKEND),
                majority,
            }),
        }
    }

    /// Whether a majority of the masters answered the last health check (every second):
    /// `/readyz` names `redis` otherwise.
    pub fn answers(&self) -> bool {
        self.inner.majority.answers()
    }

    /// How many masters make a majority.
    pub fn quorum(&self) -> usize {
        self.inner.masters.len() / 2 + 1
    }

    /// The allowance for clock drift between this process and the masters over one TTL.
    fn drift(&self) -> Duration {
        self.inner.drift + self.inner.options.ttl / 100
    }

    /// Until when a lock whose winning round was sent at `sent` is ours, if it still is.
    fn valid_until(&self, sent: Instant) -> Option<Instant> {
        let until = sent + self.inner.options.ttl.checked_sub(self.drift())?;
        (Instant::now() < until).then_some(until)
    }

    /// The Redis key of `product`'s lock (the same name on every master).
    pub fn key(&self, product: ProductId) -> String {
        self.inner.keys.product_lock(product)
    }

    fn keys_of(&self, products: &[ProductId]) -> Vec<String> {
        let mut ids = products.to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(|id| self.key(id)).collect()
    }

    /// Locks every product of `products` (duplicates ignored) on a majority of the masters.
    pub async fn acquire_all(&self, products: &[ProductId]) -> Result<Locks, LockError> {
        let keys = self.keys_of(products);
        let ttl = self.inner.options.ttl;
        let started = Instant::now();
        let deadline = started + self.inner.options.wait;
        let mut attempt = 0;
        let quorum = self.quorum();
        loop {
            // A token per round: a late release of a lost round's keys can never delete what
            // a later round of the same holder took.
            let token = Uuid::new_v4().to_string();
            // Freed everywhere if this future is dropped before the keys are handed over.
            let mut round = Round {
                lock: self,
                keys: &keys,
                token: &token,
                armed: true,
            };
            let sent = Instant::now();
            // Done once a majority took the keys, or cannot (knowing whether a majority
            // answers at all): a slow or frozen master costs nothing then.
            let answers = self
                .ask(
                    |mut conn, keys, token| async move {
                        scripts::take_all(&mut conn, &keys, &token, ttl).await
                    },
                    &keys,
                    &token,
                    |answers: &[redis::RedisResult<bool>], pending| {
                        let taken = answers.iter().filter(|a| matches!(a, Ok(true))).count();
                        let ok = answers.iter().filter(|a| a.is_ok()).count();
                        taken >= quorum
                            || (taken + pending < quorum && (ok >= quorum || ok + pending < quorum))
                    },
                )
                .await;
            let taken = answers.iter().filter(|a| matches!(a, Ok(true))).count();
            if taken >= self.quorum()
                && let Some(until) = self.valid_until(sent)
            {
                round.armed = false;
                return Ok(self.held(keys.clone(), token.clone(), until, started));
            }
            // A minority took the keys, or a majority too late: free them everywhere (a
            // master that did not answer may still have run the script), when `round` drops.
            drop(round);
            let answered = answers.iter().filter(|a| a.is_ok()).count();
            if answered < self.quorum() {
                return Ok(self.bypass(&answers));
            }
            let now = Instant::now();
            if now >= deadline {
                self.inner.counters.timed_out(started.elapsed());
                return Err(LockError::Timeout(self.inner.options.wait));
            }
            let pause =
                platform::retry::backoff(attempt, BACKOFF_BASE, BACKOFF_CAP).min(deadline - now);
            attempt += 1;
            tokio::time::sleep(pause).await;
        }
    }

    fn held(&self, keys: Vec<String>, token: String, until: Instant, started: Instant) -> Locks {
        if self.inner.unreachable.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "a majority of the Redlock masters answers again: locks are taken again"
            );
        }
        self.inner.counters.acquired(started.elapsed());
        Locks::new(RedlockHeld::held(self.clone(), keys, token, until))
    }

    /// Locks that hold nothing: fewer than a majority of the masters answered.
    fn bypass<T>(&self, answers: &[redis::RedisResult<T>]) -> Locks {
        if !self.inner.unreachable.swap(true, Ordering::Relaxed) {
            let error = answers
                .iter()
                .find_map(|a| a.as_ref().err())
                .map(ToString::to_string)
                .unwrap_or_default();
            tracing::warn!(
                %error,
                "fewer than a majority of the Redlock masters answer: deducting stock without \
                 locks until they do (the conditional update keeps stock correct)"
            );
        }
        self.inner.counters.bypassed(true);
        Locks::new(RedlockHeld::bypassed())
    }
}

impl StockLock for Redlock {
    fn acquire_all<'a>(
        &'a self,
        products: &'a [ProductId],
    ) -> BoxFuture<'a, Result<Locks, LockError>> {
        Box::pin(Redlock::acquire_all(self, products))
    }

    fn try_acquire_many<'a>(&'a self, products: &'a [ProductId]) -> BoxFuture<'a, Partial> {
        Box::pin(Redlock::try_acquire_many(self, products))
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
