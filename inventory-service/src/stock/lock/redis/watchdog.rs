//! The watchdog of Redis locks: it renews a holder's leases every third of the TTL and marks
//! them lost (once, counted once) when a key is gone or Redis stayed unreachable too long.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::RedisHealth;
use tokio_util::sync::CancellationToken;

use super::lease::Lease;
use crate::metrics;

/// What the watchdog and the holder share.
#[derive(Debug)]
pub(super) struct HeldState {
    /// Cancelled when a lock is found lost.
    pub(super) lost: CancellationToken,
    /// Until when every lock is known to be ours: the send time of the last confirmed
    /// acquisition or renewal plus the TTL.
    pub(super) valid_until: Mutex<Instant>,
    /// Set once the loss was counted, so it is counted once.
    pub(super) reported: AtomicBool,
    /// The metrics' `backend` label: `redis` or `redis-cluster`.
    pub(super) backend: &'static str,
}

impl HeldState {
    pub(super) fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn extend(&self, until: Instant) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = until;
    }

    pub(super) fn mark_lost(&self) {
        self.lost.cancel();
        if !self.reported.swap(true, Ordering::Relaxed) {
            metrics::lock_lost(self.backend);
        }
    }
}

/// Renews every lease every `ttl / 3` until `stop`; marks the locks lost when a renewal finds
/// a key gone or not ours, or when Redis stayed unreachable until the locks may have expired.
pub(super) async fn renew_until_stopped(
    mut conn: RedisConnection,
    leases: Vec<Lease>,
    state: Arc<HeldState>,
    ttl: Duration,
    health: RedisHealth,
    stop: CancellationToken,
) {
    let period = ttl / 3;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let sent_at = Instant::now();
        let mut confirmed = true;
        for lease in &leases {
            if health.is_down() {
                // No use waiting for the timeout: the expiry check below decides.
                confirmed = false;
                break;
            }
            match lease.renew(&mut conn, ttl).await {
                Ok(true) => metrics::lock_renewed(state.backend),
                Ok(false) => {
                    if !stop.is_cancelled() {
                        tracing::warn!(
                            key = lease.key(),
                            "stock lock lost: its key is gone or held by another token"
                        );
                        state.mark_lost();
                    }
                    return;
                }
                Err(error) => {
                    tracing::debug!(%error, key = lease.key(), "could not renew a stock lock; will retry");
                    health.record_failure(&error);
                    confirmed = false;
                }
            }
        }
        if stop.is_cancelled() {
            return;
        }
        if confirmed {
            state.extend(sent_at + ttl);
        } else if Instant::now() >= state.valid_until() {
            tracing::warn!("stock lock lost: Redis stayed unreachable until it may have expired");
            state.mark_lost();
            return;
        }
    }
}
