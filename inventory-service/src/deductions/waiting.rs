//! What waits for a batch of deductions — a request and where its answer goes, an end of a
//! hold and where the hold goes — and the counters of what batches did. A leaf: the queue
//! that gathers them and the batch that answers them both name it.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;

use super::attempt::Attempted;
use super::error::DeductionError;
use super::request::DeductionRequest;
use crate::holds::queries::HoldRow;
use crate::holds::step::Step;
use crate::replay::StoredResponse;

/// A queued request and where its answer goes.
pub(super) struct Waiter {
    pub request: DeductionRequest,
    /// Of the items, worked out before queueing so the leader does not hash for everyone.
    pub fingerprint: String,
    pub reply: oneshot::Sender<Result<StoredResponse, DeductionError>>,
}

/// A queued confirm or cancel of a hold on the queue's products, and where the hold goes as
/// the batch left it (`None`: the batch did not decide it).
pub(super) struct EndWaiter {
    pub step: Step,
    pub hold_id: String,
    pub reply: oneshot::Sender<Option<HoldRow>>,
}

/// What the batches did so far; [`super::BatchStats`] is its reading.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub batches: AtomicU64,
    pub commits: AtomicU64,
    pub reads: AtomicU64,
    pub ends: AtomicU64,
}

impl Counters {
    pub(super) fn count(&self, attempted: &Attempted) {
        self.commits
            .fetch_add(u64::from(attempted.wrote), Ordering::Relaxed);
        self.reads
            .fetch_add(u64::from(attempted.read), Ordering::Relaxed);
        self.ends
            .fetch_add(attempted.decided.len() as u64, Ordering::Relaxed);
    }
}
