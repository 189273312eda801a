//! [`RedisLocks`]: what a holder of Redis locks has, its watchdog ([`super::watchdog`]), and
//! the check before commit.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::RedisHealth;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::super::Held;
use super::lease::{Lease, release_all, release_in_background};
use super::watchdog::{HeldState, renew_until_stopped};
use super::{LockError, LockOptions};

/// Redis locks held by one holder (or, when bypassed, none), behind [`super::super::Locks`].
/// Release them with [`RedisLocks::release`]; dropping them releases too, in the background.
pub struct RedisLocks {
    /// `None` when bypassed.
    conn: Option<RedisConnection>,
    leases: Vec<Lease>,
    state: Arc<HeldState>,
    /// Stops the watchdog when dropped.
    watchdog: Option<DropGuard>,
    released: bool,
    ttl: Duration,
    health: RedisHealth,
    /// This process's turn on the products; declared last, so it passes on only after the
    /// keys were released (fields drop in declaration order).
    turns: super::local::Turns,
}

impl std::fmt::Debug for RedisLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLocks")
            .field(
                "keys",
                &self.leases.iter().map(Lease::key).collect::<Vec<_>>(),
            )
            .field("bypassed", &self.is_bypassed())
            .field("lost", &self.state.lost.is_cancelled())
            .finish()
    }
}

impl RedisLocks {
    pub(super) fn held(
        conn: RedisConnection,
        leases: Vec<Lease>,
        valid_until: Instant,
        options: LockOptions,
        health: RedisHealth,
    ) -> Self {
        let state = Arc::new(HeldState {
            lost: CancellationToken::new(),
            valid_until: Mutex::new(valid_until),
            reported: AtomicBool::new(false),
            backend: super::backend_of(&conn),
        });
        let watchdog = (options.renew && !leases.is_empty()).then(|| {
            let stop = CancellationToken::new();
            tokio::spawn(renew_until_stopped(
                conn.clone(),
                leases.clone(),
                state.clone(),
                options.ttl,
                health.clone(),
                stop.clone(),
            ));
            stop.drop_guard()
        });
        Self {
            conn: Some(conn),
            leases,
            state,
            watchdog,
            released: false,
            ttl: options.ttl,
            health,
            turns: Vec::new(),
        }
    }

    pub(super) fn bypassed() -> Self {
        Self {
            conn: None,
            leases: Vec::new(),
            state: Arc::new(HeldState {
                lost: CancellationToken::new(),
                valid_until: Mutex::new(Instant::now()),
                reported: AtomicBool::new(false),
                // Never lost nor renewed: it holds nothing.
                backend: super::BACKEND,
            }),
            watchdog: None,
            released: true,
            ttl: Duration::ZERO,
            health: RedisHealth::default(),
            turns: Vec::new(),
        }
    }

    pub(super) fn with_turns(mut self, turns: super::local::Turns) -> Self {
        self.turns = turns;
        self
    }

    /// `true` when Redis was unreachable and nothing is locked.
    pub fn is_bypassed(&self) -> bool {
        self.conn.is_none()
    }

    /// The Redis keys held, in the order they were taken.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.leases.iter().map(Lease::key)
    }

    /// The random tokens the keys hold, one per key, in the order of [`RedisLocks::keys`].
    pub fn tokens(&self) -> impl Iterator<Item = &str> {
        self.leases.iter().map(Lease::token)
    }

    /// Cancelled as soon as the watchdog finds a lock lost; lets a long holder stop early.
    pub fn lost(&self) -> CancellationToken {
        self.state.lost.clone()
    }

    /// Call right before commit: `Err(Lost)` when a lock was lost or may have expired (the
    /// last confirmed expiry has passed). Then roll back and start over. Always `Ok` when
    /// bypassed.
    pub fn ensure_held(&self) -> Result<(), LockError> {
        if self.is_bypassed() || self.leases.is_empty() {
            return Ok(());
        }
        if !self.state.lost.is_cancelled() && Instant::now() < self.state.valid_until() {
            return Ok(());
        }
        self.state.mark_lost();
        Err(LockError::Lost)
    }

    /// Stops renewing, leaves each key to the next holder of this process when one waits
    /// for it (see [`super::local`]), and deletes the others while they are still ours (best
    /// effort: a key that cannot be deleted expires by itself).
    pub async fn release(mut self) {
        drop(self.watchdog.take());
        let Some(mut conn) = self.conn.clone() else {
            self.released = true;
            return;
        };
        let leases = std::mem::take(&mut self.leases);
        // A lost lock is not ours to pass on.
        self.leases = if self.state.lost.is_cancelled() || leases.len() != self.turns.len() {
            leases
        } else {
            let valid_until = self.state.valid_until();
            let mut to_delete = Vec::new();
            for (lease, turn) in leases.into_iter().zip(&mut self.turns) {
                if let Some(lease) = turn.hand_over(lease, &conn, valid_until, self.ttl) {
                    to_delete.push(lease);
                }
            }
            to_delete
        };
        if self.health.is_down() {
            // Waiting for a Redis that does not answer would hold up the next holder.
            release_in_background(&conn, std::mem::take(&mut self.leases));
        } else {
            // Still unreleased while the deletes are under way: if this future is dropped
            // midway (a request timing out), `Drop` deletes the keys in the background.
            release_all(&mut conn, &self.leases).await;
        }
        self.released = true;
    }
}

impl Held for RedisLocks {
    fn is_bypassed(&self) -> bool {
        RedisLocks::is_bypassed(self)
    }

    fn keys(&self) -> Vec<&str> {
        RedisLocks::keys(self).collect()
    }

    fn tokens(&self) -> Vec<&str> {
        RedisLocks::tokens(self).collect()
    }

    fn lost(&self) -> CancellationToken {
        RedisLocks::lost(self)
    }

    fn ensure_held(&self) -> Result<(), LockError> {
        RedisLocks::ensure_held(self)
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(RedisLocks::release(*self))
    }
}

impl Drop for RedisLocks {
    fn drop(&mut self) {
        // Dropped without `release` (an error path, a timed-out request): free the keys now
        // rather than after their TTL, if a runtime is there to do it.
        if self.released {
            return;
        }
        let (Some(mut conn), Ok(runtime)) =
            (self.conn.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let leases = std::mem::take(&mut self.leases);
        runtime.spawn(async move { release_all(&mut conn, &leases).await });
    }
}
