//! [`Counters`]: what one lock counts of its own ([`super::StockLock::stats`]), kept in step
//! with the process-wide metrics it adds to, for every implementation alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::LockStats;
use crate::metrics;

/// One lock's counts, each added to its `backend`'s metrics at the same time.
#[derive(Debug)]
pub struct Counters {
    backend: &'static str,
    acquired: AtomicU64,
    timeouts: AtomicU64,
    bypassed: AtomicU64,
    service_failures: AtomicU64,
}

impl Counters {
    pub fn new(backend: &'static str) -> Self {
        Self {
            backend,
            acquired: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            service_failures: AtomicU64::new(0),
        }
    }

    /// Locks taken after waiting `waited`.
    pub fn acquired(&self, waited: Duration) {
        self.acquired.fetch_add(1, Ordering::Relaxed);
        metrics::lock_acquired(self.backend, metrics::LockResult::Acquired, waited);
    }

    /// An acquisition that gave up after `waited`.
    pub fn timed_out(&self, waited: Duration) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        metrics::lock_acquired(self.backend, metrics::LockResult::Timeout, waited);
    }

    /// Locks that hold nothing handed out; `failed`: a call to the lock service failed (not
    /// one skipped because the service was already known down).
    pub fn bypassed(&self, failed: bool) {
        if failed {
            self.service_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.bypassed.fetch_add(1, Ordering::Relaxed);
        metrics::lock_bypassed(self.backend);
    }

    pub fn stats(&self) -> LockStats {
        LockStats {
            acquired: self.acquired.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            service_failures: self.service_failures.load(Ordering::Relaxed),
        }
    }
}
