//! [`EtcdHeld`]: what a holder of etcd locks has. Nothing renews it on its own: the instance's
//! lease keep-alive keeps every key alive, and the lease's lapse is the loss of all of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::super::{Held, LockError};
use super::lease::Epoch;
use super::{BACKEND, EtcdLock};
use crate::metrics;

/// Keys put under one lease with one token (or, when bypassed or empty, nothing). Freed by
/// [`Held::release`], or in the background when dropped; gone with the lease otherwise.
pub struct EtcdHeld {
    /// `None` when nothing is held.
    lock: Option<EtcdLock>,
    /// Each key and the revision that created it.
    taken: Vec<(String, i64)>,
    /// The revisions as text: the fencing tokens [`Held::tokens`] lends.
    revisions: Vec<String>,
    /// The value of every key, so a release frees no one else's.
    token: String,
    /// The lease the keys live under.
    epoch: Option<Arc<Epoch>>,
    /// A child of the lease's `lapsed`: cancelled when the lease lapses, or when
    /// [`Held::ensure_held`] finds the lease past its last known validity.
    lost: CancellationToken,
    /// Set once the loss was counted, so it is counted once.
    reported: AtomicBool,
    bypassed: bool,
    released: bool,
}

impl EtcdHeld {
    pub(super) fn held(
        lock: EtcdLock,
        taken: Vec<(String, i64)>,
        token: String,
        epoch: Arc<Epoch>,
    ) -> Self {
        Self {
            lock: Some(lock),
            revisions: taken
                .iter()
                .map(|(_, revision)| revision.to_string())
                .collect(),
            taken,
            token,
            lost: epoch.lapsed.child_token(),
            epoch: Some(epoch),
            reported: AtomicBool::new(false),
            bypassed: false,
            released: false,
        }
    }

    /// Locks that hold nothing because etcd could not be asked.
    pub(super) fn bypassed() -> Self {
        let mut nothing = Self::nothing();
        nothing.bypassed = true;
        nothing
    }

    /// Locks that hold nothing because nothing was free.
    pub(super) fn nothing() -> Self {
        Self {
            lock: None,
            taken: Vec::new(),
            revisions: Vec::new(),
            token: String::new(),
            epoch: None,
            lost: CancellationToken::new(),
            reported: AtomicBool::new(false),
            bypassed: false,
            released: true,
        }
    }
}

impl Held for EtcdHeld {
    fn is_bypassed(&self) -> bool {
        self.bypassed
    }

    fn keys(&self) -> Vec<&str> {
        self.taken.iter().map(|(key, _)| key.as_str()).collect()
    }

    fn tokens(&self) -> Vec<&str> {
        self.revisions.iter().map(String::as_str).collect()
    }

    fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    fn ensure_held(&self) -> Result<(), LockError> {
        let Some(epoch) = &self.epoch else {
            return Ok(());
        };
        if !self.lost.is_cancelled() && epoch.is_live() {
            return Ok(());
        }
        self.lost.cancel();
        if !self.reported.swap(true, Ordering::Relaxed) {
            metrics::lock_lost(BACKEND);
        }
        Err(LockError::Lost)
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        self.released = true;
        let taken = std::mem::take(&mut self.taken);
        let (lock, token) = (self.lock.take(), std::mem::take(&mut self.token));
        // Spawned, so that it runs even if the caller drops the future unpolled; awaited until
        // etcd freed the keys, so that the next holder (often this process's next batch of the
        // same products) finds them free.
        let Some(lock) = lock else {
            return Box::pin(async {});
        };
        if tokio::runtime::Handle::try_current().is_err() {
            lock.release_in_background(&taken, &token);
            return Box::pin(async {});
        }
        let release = tokio::spawn(async move { lock.release(&taken, &token).await });
        Box::pin(async move {
            let _ = release.await;
        })
    }
}

impl Drop for EtcdHeld {
    fn drop(&mut self) {
        // Dropped without `release` (an error path, a timed-out request): free the keys now
        // rather than with the lease.
        if self.released {
            return;
        }
        if let Some(lock) = self.lock.take() {
            lock.release_in_background(&self.taken, &self.token);
        }
    }
}
