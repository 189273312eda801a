//! Running one batch of deductions (and holds' tries, and ends of holds taken here) for one
//! product set, under its locks, until it is decided or out of retries:
//! ```text
//! let locks = locker.acquire_all(&products).await?;   // once per attempt; may be bypassed
//! locks.ensure_held()?;                               // lost while waiting? try again
//! attempt: read (or remember), judge, write           // `super::attempt`: one or two round trips
//! locks.release(); answer every request
//! ```
//! A write that lost a race (a product's version moved, an id stored meanwhile) wrote
//! nothing and fails with a serialization failure, retried with backoff ([`Retry`]) until 503
//! `busy` (the next read then sees what the other writer did, and replays its id).
//!
//! The Redis lock keeps batches of several processes from judging the same stock at once, so
//! that misses stay rare; it is not what keeps stock correct. A lock lost during the attempt
//! cannot make it write on a stale read: the version check refuses it.

use std::collections::HashMap;

use platform::storage::{Database, Session};
use shared::ids::ProductId;

use super::attempt::{self, Attempted, End, Entry, Remembered};
use super::error::DeductionError;
use super::response::{self, Answer};
use super::retry::{AttemptError, Retry};
use super::waiting::{Counters, EndWaiter, Waiter};
use crate::holds::held_here::Placed;
use crate::holds::queries::HoldRow;
use crate::metrics;
use crate::stock::lock::{Locker, Locks};

/// What a batch answers: each request's answer, each end's hold (`None`: not decided in the
/// batch; it goes the general way), the stock it left, the holds it took.
#[derive(Debug, Default)]
pub(super) struct Ran {
    pub answers: Vec<Answer>,
    pub ended: Vec<Option<HoldRow>>,
    pub left: Option<Remembered>,
    pub placed: Vec<(String, Placed)>,
}

/// Applies `batch` (every request for `products`) and its `ends`, and answers each; also
/// returns the stock it left, for the next batch of the same products to start from.
pub(super) async fn run(
    (db, session): (&Database, &mut Session),
    locker: &Locker,
    counters: &Counters,
    products: &[ProductId],
    (batch, ends): (&[Waiter], &[EndWaiter]),
    mut remembered: Option<Remembered>,
) -> Ran {
    let entries: Vec<Entry<'_>> = batch
        .iter()
        .map(|w| Entry {
            request: &w.request,
            fingerprint: &w.fingerprint,
        })
        .collect();
    let end_entries: Vec<End<'_>> = ends
        .iter()
        .map(|e| End {
            step: e.step,
            hold_id: &e.hold_id,
        })
        .collect();
    let mut retry = Retry::new(locker.options().wait);
    loop {
        let attempted = attempt_under_locks(
            (db, &mut *session),
            locker,
            products,
            (&entries, &end_entries),
            remembered.take(),
        )
        .await;
        match attempted {
            Err(error) if error.is_retryable() && retry.pause().await => {
                if matches!(error, AttemptError::Refused(DeductionError::Database(_))) {
                    metrics::version_conflict();
                }
                tracing::debug!(%error, size = batch.len(), "retrying a batch of deductions");
            }
            Ok(attempted) => {
                counters.count(&attempted);
                let answers = attempted
                    .verdicts
                    .into_iter()
                    .zip(batch)
                    .map(|(verdict, w)| response::answer(verdict, w.request.take.kind()))
                    .collect();
                let mut decided: HashMap<String, HoldRow> = attempted
                    .decided
                    .into_iter()
                    .map(|row| (row.hold_id.clone(), row))
                    .collect();
                let ended = ends.iter().map(|e| decided.remove(&e.hold_id)).collect();
                return Ran {
                    answers,
                    ended,
                    left: attempted.left,
                    placed: attempted.placed,
                };
            }
            // The ends go the general way, which answers its own failure.
            Err(error) => {
                return Ran {
                    answers: response::failed(error.into(), batch.len()),
                    ended: ends.iter().map(|_| None).collect(),
                    ..Ran::default()
                };
            }
        }
    }
}

/// One attempt under the batch's locks, taken for it and released after it.
async fn attempt_under_locks(
    (db, session): (&Database, &mut Session),
    locker: &Locker,
    products: &[ProductId],
    batch: (&[Entry<'_>], &[End<'_>]),
    remembered: Option<Remembered>,
) -> Result<Attempted, AttemptError> {
    let locks = locker.acquire_all(products).await?;
    let result = apply_under(&locks, (db, &mut *session), products, batch, remembered).await;
    locks.release().await;
    // A session whose statement failed other than by losing a race (a broken connection, a
    // failover) is not kept for the next batch.
    if let Err(AttemptError::Refused(DeductionError::Database(error))) = &result
        && !platform::messaging::consumer::is_database_contention(error)
    {
        session.discard();
    }
    result
}

async fn apply_under(
    locks: &Locks,
    (db, session): (&Database, &mut Session),
    products: &[ProductId],
    (entries, ends): (&[Entry<'_>], &[End<'_>]),
    remembered: Option<Remembered>,
) -> Result<Attempted, AttemptError> {
    // A lock that expired while its holder was paused: give it up before writing anything.
    locks.ensure_held()?;
    let mut conn = session.get(db).await?;
    if remembered.is_some() {
        match attempt::apply_on(conn.reborrow(), products, entries, ends, remembered).await {
            // The memory was stale (another writer, a restock), or an id of the batch was
            // stored before it: nothing was written; read, still under the same locks.
            Err(DeductionError::Database(error))
                if platform::messaging::consumer::is_database_contention(&error) =>
            {
                tracing::debug!(%error, "the remembered stock was stale; reading it");
            }
            done => return Ok(done?),
        }
    }
    Ok(attempt::apply_on(conn, products, entries, ends, None).await?)
}
