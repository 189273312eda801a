//! The Redis half of [`RedisLock::acquire_all`]: with this process's turns held, take each
//! product's key (or use the one the previous local holder left, while it is young), retried
//! with jittered backoff until the deadline; bypass without calling Redis once it is known
//! down.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::{RedisCallError, RedisHealth};
use shared::ids::ProductId;

use super::lease::{Lease, release_all, release_in_background};
use super::{LockError, Locks, RedisLock, RedisLocks, local};

/// First and largest pause between two tries of a busy lock (full jitter in between).
const BACKOFF_BASE: Duration = Duration::from_millis(2);
const BACKOFF_CAP: Duration = Duration::from_millis(50);

impl RedisLock {
    /// With this process's turns on `ids`, takes their Redis keys (or the ones the previous
    /// local holders left).
    pub(super) async fn take_keys(
        &self,
        ids: Vec<ProductId>,
        mut turns: local::Turns,
        started: Instant,
        deadline: Instant,
    ) -> Result<Locks, LockError> {
        let inner = &self.inner;
        let ttl = inner.options.ttl;
        let mut conn = inner.redis.clone();
        if inner.health.is_down() {
            // Keys left by the previous holders are deleted in the background (or expire).
            for turn in &mut turns {
                drop(turn.take_kept());
            }
            return Ok(Locks::new(
                self.bypass(&RedisCallError::Down).with_turns(turns),
            ));
        }
        let mut leases = Vec::with_capacity(ids.len());
        // The first key to expire bounds them all.
        let mut valid_until: Option<Instant> = None;
        let mut bound = |until: Instant| {
            valid_until = Some(valid_until.map_or(until, |v| v.min(until)));
        };
        for (id, turn) in ids.into_iter().zip(turns.iter_mut()) {
            if let Some(kept) = turn.take_kept() {
                let fit = kept.usable(ttl);
                if let Some((lease, until)) = kept.take() {
                    if fit {
                        bound(until);
                        leases.push(lease);
                        continue;
                    }
                    release_all(&mut conn, &[lease]).await;
                }
            }
            let lease = Lease::new(inner.keys.product_lock(id));
            match acquire_one(&inner.health, &mut conn, &lease, ttl, deadline).await {
                Ok(Some(sent_at)) => {
                    bound(sent_at + ttl);
                    leases.push(lease);
                }
                Ok(None) => {
                    if let Err(error) = lease.give_up(&mut conn).await {
                        tracing::debug!(%error, "could not unregister a lock waiter; it expires");
                    }
                    release_all(&mut conn, &leases).await;
                    return Err(self.timed_out(started));
                }
                Err(error) => {
                    if matches!(error, RedisCallError::Failed(_)) {
                        // The failed SET may still land (a lost reply, or a hung Redis that
                        // runs it once it wakes up): free that key too.
                        leases.push(lease);
                    }
                    release_in_background(&conn, std::mem::take(&mut leases));
                    return Ok(Locks::new(self.bypass(&error).with_turns(turns)));
                }
            }
        }
        if inner.redis_down.swap(false, Ordering::Relaxed) {
            tracing::info!("Redis is reachable again: stock deductions take their locks again");
        }
        inner.counters.acquired(started.elapsed());
        Ok(Locks::new(
            RedisLocks::held(
                conn,
                leases,
                valid_until.unwrap_or(started + ttl),
                inner.options,
                inner.health.clone(),
            )
            .with_turns(turns),
        ))
    }
}

/// Tries one lease until `deadline`; `Some(instant the winning SET was sent)` when taken.
/// Stops at once when Redis is (or becomes) known down.
async fn acquire_one(
    health: &RedisHealth,
    conn: &mut RedisConnection,
    lease: &Lease,
    ttl: Duration,
    deadline: Instant,
) -> Result<Option<Instant>, RedisCallError> {
    let mut attempt = 0;
    loop {
        let sent_at = Instant::now();
        // Safe to run twice: the script takes a lock its own token already holds.
        let try_once = || {
            let mut conn = conn.clone();
            async move { lease.try_acquire(&mut conn, ttl).await }
        };
        if health.call(try_once).await? {
            return Ok(Some(sent_at));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let pause =
            platform::retry::backoff(attempt, BACKOFF_BASE, BACKOFF_CAP).min(deadline - now);
        attempt += 1;
        tokio::time::sleep(pause).await;
    }
}
