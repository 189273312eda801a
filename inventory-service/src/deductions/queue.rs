//! The group commit of `POST /deductions`: requests for the same products queue up while a
//! batch of theirs is being applied, and when it commits, the leader takes everything queued
//! (up to [`MAX_BATCH`]) as the next batch. No wait to gather: a request that finds no batch
//! under way starts one at once, alone.
//!
//! Requests are grouped by their lock key, the sorted set of their products. The hot case
//! (many one-item deductions of one product) shares a key; a multi-item request batches with
//! requests for exactly its products, and batches of overlapping keys meet, one at a time,
//! at the product locks and the conditional update. Grouping by exact key keeps the batch
//! under one [`crate::stock::lock::Locker::acquire_all`] of a fixed product set, so a batch never
//! grows its lock set while holding it.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::anyhow;
use platform::storage::postgres::planned_once::Shelf;
use platform::storage::{Database, Session};
use shared::ids::ProductId;
use tokio::sync::oneshot;

use super::batch;
use super::error::DeductionError;
use super::request::DeductionRequest;
use super::waiting::{Counters, EndWaiter, Waiter};
use crate::holds::held_here::HeldHere;
use crate::holds::queries::HoldRow;
use crate::holds::step::Step;
use crate::replay::StoredResponse;
use crate::stock::lock::Locker;

/// The most requests one batch applies; the rest wait for the next commit.
pub const MAX_BATCH: usize = 128;

/// What waits in a queue: requests that take stock, and ends of holds on the same products.
enum Queued {
    Take(Waiter),
    End(EndWaiter),
}

impl Queued {
    fn is_closed(&self) -> bool {
        match self {
            Self::Take(waiter) => waiter.reply.is_closed(),
            Self::End(waiter) => waiter.reply.is_closed(),
        }
    }
}

/// What the batches did so far, for tests and operators.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    /// Batches a leader took from a queue.
    pub batches: u64,
    /// Transactions committed by batches.
    pub commits: u64,
    /// Reads of stock before judging (a batch judged against the stock its leader remembers
    /// reads nothing).
    pub reads: u64,
    /// Confirms and cancels of holds decided inside a batch, not by a commit of their own.
    pub ends: u64,
    /// Requests queued and not yet taken into a batch.
    pub waiting: usize,
}

/// Applies `POST /deductions` in batches. Cheap to clone; one per process.
#[derive(Clone)]
pub struct Deductions {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    locker: Locker,
    /// A key is present exactly while a leader serves it.
    queues: Mutex<HashMap<Vec<ProductId>, VecDeque<Queued>>>,
    counters: Counters,
    /// The holds taken here and not yet ended: where their ends queue.
    held_here: HeldHere,
    /// Sessions of leaders that ended, for the next leaders (at most [`KEPT_SESSIONS`]).
    sessions: Shelf,
}

/// Sessions kept between leaders: a leader plans its statements once per session, so a new
/// leader (one per hot product, one per request when idle) takes a kept session rather than
/// preparing and planning them again. Each keeps one pooled connection out of the pool, so a
/// small pool keeps fewer, or none (`planned_once::keepable`).
const KEPT_SESSIONS: usize = 2;

impl std::fmt::Debug for Deductions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deductions")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Deductions {
    pub fn new(db: Database, locker: Locker) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                locker,
                queues: Mutex::default(),
                counters: Counters::default(),
                held_here: HeldHere::default(),
                sessions: Shelf::new(KEPT_SESSIONS),
            }),
        }
    }

    pub fn stats(&self) -> BatchStats {
        BatchStats {
            batches: self.inner.counters.batches.load(Ordering::Relaxed),
            commits: self.inner.counters.commits.load(Ordering::Relaxed),
            reads: self.inner.counters.reads.load(Ordering::Relaxed),
            ends: self.inner.counters.ends.load(Ordering::Relaxed),
            waiting: self.queues().values().map(VecDeque::len).sum(),
        }
    }

    /// The stock lock its batches take.
    pub fn locker(&self) -> &Locker {
        &self.inner.locker
    }

    /// How many holds taken here have not been ended here yet (nor forgotten).
    pub fn held_here(&self) -> usize {
        self.inner.held_here.len()
    }

    /// Applies `request` once per deduction id, in the next batch for its products; a repeat
    /// gets the first outcome.
    pub async fn apply(&self, request: DeductionRequest) -> Result<StoredResponse, DeductionError> {
        let key = request.items.product_ids();
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter {
            fingerprint: request.fingerprint(),
            request,
            reply,
        };
        self.enqueue(key, Queued::Take(waiter));
        answer
            .await
            .unwrap_or_else(|_| Err(anyhow!("the deduction batch stopped before answering").into()))
    }

    /// Runs `step` on `hold_id` in the next batch of its products, when this process took it
    /// and no other end of it came here before: the hold as the batch's statement left it.
    /// `None` when it was not taken here, or the statement did not change it (no longer
    /// `HELD`, past its deadline for a confirm, locked by another writer, or the batch
    /// failed): then the caller decides it the general way (`crate::holds::batched`), which
    /// also words every refusal.
    pub async fn end(&self, step: Step, hold_id: &str) -> Option<HoldRow> {
        let key = self.inner.held_here.take(hold_id)?;
        let (reply, answer) = oneshot::channel();
        let waiter = EndWaiter {
            step,
            hold_id: hold_id.to_owned(),
            reply,
        };
        self.enqueue(key, Queued::End(waiter));
        answer.await.ok().flatten()
    }

    fn enqueue(&self, key: Vec<ProductId>, queued: Queued) {
        let lead = match self.queues().entry(key.clone()) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push_back(queued);
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(VecDeque::from([queued]));
                true
            }
        };
        if lead {
            // The leader runs on its own task, not on this request's: a client that goes
            // away (or the request timeout) must not drop a batch that answers others. It
            // ends as soon as its queue is empty.
            tokio::spawn(self.clone().lead(key));
        }
    }

    async fn lead(self, key: Vec<ProductId>) {
        let mut leading = Leading {
            deductions: &self,
            key: &key,
            armed: true,
        };
        // The stock this leader's last batch left: the next one is judged against it without
        // reading (one round trip instead of two), its write checking that nothing moved.
        let mut remembered = None;
        let mut session = Session::kept(self.inner.sessions.take());
        loop {
            let (mut batch, mut ends) = (Vec::new(), Vec::new());
            {
                let mut queues = self.queues();
                let Some(queue) = queues.get_mut(&key).filter(|q| !q.is_empty()) else {
                    queues.remove(&key);
                    drop(queues);
                    leading.armed = false;
                    // A PostgreSQL session goes back on the shelf for the next leader; MySQL
                    // keeps none (its connection went back to the pool after the last batch).
                    if let Database::Postgres(pool) = &self.inner.db {
                        self.inner.sessions.put_back(session.into_kept(), pool);
                    }
                    return;
                };
                let size = queue.len().min(MAX_BATCH);
                // A request whose client left (or timed out) while it queued is dropped
                // unapplied: its client was not told it went through, and a retry with the
                // same id applies it then (an end's retry goes the general way).
                for queued in queue.drain(..size).filter(|q| !q.is_closed()) {
                    match queued {
                        Queued::Take(waiter) => batch.push(waiter),
                        Queued::End(waiter) => ends.push(waiter),
                    }
                }
            }
            if batch.is_empty() && ends.is_empty() {
                continue;
            }
            self.inner.counters.batches.fetch_add(1, Ordering::Relaxed);
            let ran = batch::run(
                (&self.inner.db, &mut session),
                &self.inner.locker,
                &self.inner.counters,
                &key,
                (&batch, &ends),
                remembered.take(),
            )
            .await;
            remembered = ran.left;
            session.end_batch(&self.inner.db);
            // Remembered before anyone is answered, so a confirm sent the moment its try is
            // answered finds the way to this batch's products.
            self.inner.held_here.remember(ran.placed);
            for (waiter, answer) in batch.into_iter().zip(ran.answers) {
                // A receiver that is gone was a client that left; its outcome is stored.
                let _ = waiter.reply.send(answer);
            }
            for (waiter, ended) in ends.into_iter().zip(ran.ended) {
                let _ = waiter.reply.send(ended);
            }
        }
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<Vec<ProductId>, VecDeque<Queued>>> {
        // Nothing panics while holding the lock, and the map stays consistent if it did.
        self.inner
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Frees the key when a leader stops without emptying its queue (a panic): the waiters are
/// dropped, so they answer 500 instead of waiting forever, and the next request leads anew.
struct Leading<'a> {
    deductions: &'a Deductions,
    key: &'a [ProductId],
    armed: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.deductions.queues().remove(self.key);
        }
    }
}
