//! [`RedlockHeld`]: what a holder of Redlock locks has, the watchdog that renews them on the
//! masters, and the check before commit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::super::{Held, LockError};
use super::{BACKEND, Redlock, scripts};
use crate::metrics;

/// What the watchdog and the holder share.
#[derive(Debug)]
struct State {
    /// Cancelled when the lock is found lost.
    lost: CancellationToken,
    /// Until when a majority is known to hold the keys for us.
    valid_until: Mutex<Instant>,
    /// Set once the loss was counted, so it is counted once.
    reported: AtomicBool,
}

impl State {
    fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn extend(&self, until: Instant) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
    }

    fn mark_lost(&self) {
        self.lost.cancel();
        if !self.reported.swap(true, Ordering::Relaxed) {
            metrics::lock_lost(BACKEND);
        }
    }
}

/// Keys held on a majority of the masters under one token (or, when bypassed or empty,
/// nothing). Freed on every master by [`Held::release`], or in the background when dropped.
pub struct RedlockHeld {
    /// `None` when nothing is held.
    lock: Option<Redlock>,
    keys: Vec<String>,
    token: String,
    bypassed: bool,
    state: Arc<State>,
    /// Stops the watchdog when dropped.
    watchdog: Option<DropGuard>,
    released: bool,
}

impl RedlockHeld {
    pub(super) fn held(lock: Redlock, keys: Vec<String>, token: String, until: Instant) -> Self {
        let state = Arc::new(State {
            lost: CancellationToken::new(),
            valid_until: Mutex::new(until),
            reported: AtomicBool::new(false),
        });
        let watchdog = lock.inner.options.renew.then(|| {
            let stop = CancellationToken::new();
            tokio::spawn(renew_until_stopped(
                lock.clone(),
                keys.clone(),
                token.clone(),
                state.clone(),
                stop.clone(),
            ));
            stop.drop_guard()
        });
        Self {
            lock: Some(lock),
            keys,
            token,
            bypassed: false,
            state,
            watchdog,
            released: false,
        }
    }

    /// Locks that hold nothing because the masters could not be asked.
    pub(super) fn bypassed() -> Self {
        let mut nothing = Self::nothing();
        nothing.bypassed = true;
        nothing
    }

    /// Locks that hold nothing because nothing was free.
    pub(super) fn nothing() -> Self {
        Self {
            lock: None,
            keys: Vec::new(),
            token: String::new(),
            bypassed: false,
            state: Arc::new(State {
                lost: CancellationToken::new(),
                valid_until: Mutex::new(Instant::now()),
                reported: AtomicBool::new(false),
            }),
            watchdog: None,
            released: true,
        }
    }
}

impl Held for RedlockHeld {
    fn is_bypassed(&self) -> bool {
        self.bypassed
    }

    fn keys(&self) -> Vec<&str> {
        self.keys.iter().map(String::as_str).collect()
    }

    fn tokens(&self) -> Vec<&str> {
        self.keys.iter().map(|_| self.token.as_str()).collect()
    }

    fn lost(&self) -> CancellationToken {
        self.state.lost.clone()
    }

    fn ensure_held(&self) -> Result<(), LockError> {
        if self.lock.is_none() {
            return Ok(());
        }
        if !self.state.lost.is_cancelled() && Instant::now() < self.state.valid_until() {
            return Ok(());
        }
        self.state.mark_lost();
        Err(LockError::Lost)
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        drop(self.watchdog.take());
        self.released = true;
        let lock = self.lock.take();
        let (keys, token) = (
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.token),
        );
        // Until a majority freed the keys, so that the next holder (often this process's
        // next batch of the same products) finds them free; the rest finish in the background.
        Box::pin(async move {
            if let Some(lock) = lock {
                lock.release_on_majority(&keys, &token).await;
            }
        })
    }
}

impl Drop for RedlockHeld {
    fn drop(&mut self) {
        // Dropped without `release` (an error path, a timed-out request): free the keys now
        // rather than after their TTL, if a runtime is there to do it.
        if self.released {
            return;
        }
        let (Some(lock), Ok(_runtime)) = (self.lock.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        lock.release_everywhere(&self.keys, &self.token);
    }
}

/// Renews the keys on every master every `ttl / 3` until `stop`. A majority renewed extends
/// the validity; once too many masters say the keys are gone or another's for a majority to
/// remain possible, or the validity ran out without a majority renewing, the lock is lost.
async fn renew_until_stopped(
    lock: Redlock,
    keys: Vec<String>,
    token: String,
    state: Arc<State>,
    stop: CancellationToken,
) {
    let ttl = lock.inner.options.ttl;
    let masters = lock.inner.masters.len();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
        let sent = Instant::now();
        let quorum = lock.quorum();
        let count = keys.len();
        // Per key: how many masters renewed it, and how many said it is not ours there.
        let tally = |answers: &[redis::RedisResult<Vec<bool>>], i: usize| {
            let said = |renewed: bool| {
                answers
                    .iter()
                    .filter(|a| matches!(a, Ok(each) if each.get(i) == Some(&renewed)))
                    .count()
            };
            (said(true), said(false))
        };
        // Done once every key is renewed by a majority, or one can no longer be: a slow or
        // frozen master must not hold the renewal up past the validity it extends.
        let answers = lock
            .ask(
                |mut conn, keys, token| async move {
                    scripts::renew_each(&mut conn, &keys, &token, ttl).await
                },
                &keys,
                &token,
                |answers: &[redis::RedisResult<Vec<bool>>], _| {
                    (0..count).all(|i| tally(answers, i).0 >= quorum)
                        || (0..count).any(|i| masters - tally(answers, i).1 < quorum)
                },
            )
            .await;
        if stop.is_cancelled() {
            return;
        }
        if (0..count).all(|i| tally(&answers, i).0 >= quorum) {
            metrics::lock_renewed(BACKEND);
            if let Some(until) = lock.valid_until(sent) {
                state.extend(until);
            }
            continue;
        }
        if (0..count).any(|i| masters - tally(&answers, i).1 < quorum) {
            tracing::warn!("Redlock lock lost: a key is gone or taken on too many masters");
            state.mark_lost();
            return;
        }
        if Instant::now() >= state.valid_until() {
            tracing::warn!("Redlock lock lost: no majority renewed it before it may have expired");
            state.mark_lost();
            return;
        }
    }
}
