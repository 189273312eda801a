//! Applying one batch of deductions for one product set:
//! ```text
//! prepare every request's answers (applied, refused by each product)   // once per batch
//! let locks = locker.acquire_all(&products).await?;   // once per attempt; may be bypassed
//! locks.ensure_held()?;                               // lost while waiting? try again
//! SELECT … FROM apply_deductions(…)                   // ONE round trip: read, judge, write, commit
//! locks.release(); answer every request
//! ```
//! The judging happens inside the database function (migration 0004), under row locks taken
//! in ascending product id: each request against the stock the earlier ones left, replays
//! and ids repeated inside the batch answered with the first outcome, the stock changed by
//! the conditional update (version and stock as read). The call runs in an implicit
//! transaction, so when it returns its outcomes are committed, durably (`synchronous_commit`
//! stays on), and only then is anyone answered.
//!
//! The Redis lock keeps batches of several processes from queueing on the row lock; it is
//! not what keeps stock correct. A lock lost during the call cannot make it write on a stale
//! read: the function reads and writes under the row lock in one transaction.
//!
//! An id recorded meanwhile by another writer fails the call with a serialization failure,
//! which is retried with backoff ([`Retry`]) until 503 `busy`; the next call replays it.

use std::sync::atomic::Ordering;

use anyhow::anyhow;
use shared::events::RejectionReason;
use shared::ids::ProductId;
use sqlx::PgPool;

use super::error::DeductionError;
use super::queries::{self, NewDeduction, Refusals, Verdict};
use super::queue::{Counters, Waiter};
use super::response::{self, applied_response, refusal_response, reused};
use super::retry::{AttemptError, Retry};
use crate::metrics;
use crate::replay::StoredResponse;
use crate::stock::lock::{Locker, Locks};

type Answer = Result<StoredResponse, DeductionError>;

/// Applies `batch` (every request for the same products) and answers each request.
pub(super) async fn run(
    db: &PgPool,
    locker: &Locker,
    counters: &Counters,
    batch: &[Waiter],
) -> Vec<Answer> {
    let products = batch
        .first()
        .map(|w| w.request.items.product_ids())
        .unwrap_or_default();
    let (deductions, refusals) = match prepare(batch, &products) {
        Ok(prepared) => prepared,
        Err(error) => return failed(error, batch.len()),
    };
    let mut retry = Retry::new(locker.options().wait);
    loop {
        match attempt(db, locker, &products, &deductions, &refusals).await {
            Err(error) if error.is_retryable() && retry.pause().await => {
                if matches!(error, AttemptError::Refused(DeductionError::Database(_))) {
                    metrics::version_conflict();
                }
                tracing::debug!(%error, size = batch.len(), "retrying a batch of deductions");
            }
            Ok(verdicts) => {
                if verdicts.iter().any(|v| matches!(v, Verdict::First(_))) {
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                }
                return verdicts.into_iter().map(answer).collect();
            }
            Err(error) => return failed(error.into(), batch.len()),
        }
    }
}

/// Every request as the function takes it, with the answer it stores if applied, and the
/// answers of a refusal by each product.
fn prepare<'a>(
    batch: &'a [Waiter],
    products: &[ProductId],
) -> Result<(Vec<NewDeduction<'a>>, Refusals), DeductionError> {
    let mut deductions = Vec::with_capacity(batch.len());
    for waiter in batch {
        let items = waiter.request.items.as_slice();
        if items.len() != products.len()
            || items.iter().zip(products).any(|(i, p)| i.product_id != *p)
        {
            return Err(anyhow!("a deduction joined a batch for other products").into());
        }
        deductions.push(NewDeduction {
            deduction_id: waiter.request.id.as_str(),
            fingerprint: &waiter.fingerprint,
            items: waiter.request.items.canonical_json(),
            quantities: items.iter().map(|i| i.quantity).collect(),
            applied: applied_response(&waiter.request)?,
        });
    }
    let refused_by = |reason| {
        products
            .iter()
            .map(|&product| refusal_response(reason, product))
            .collect::<Result<Vec<_>, _>>()
    };
    let refusals = Refusals {
        short: refused_by(RejectionReason::InsufficientStock)?,
        unknown: refused_by(RejectionReason::UnknownProduct)?,
    };
    Ok((deductions, refusals))
}

async fn attempt(
    db: &PgPool,
    locker: &Locker,
    products: &[ProductId],
    deductions: &[NewDeduction<'_>],
    refusals: &Refusals,
) -> Result<Vec<Verdict>, AttemptError> {
    let locks = locker.acquire_all(products).await?;
    let result = apply_under(&locks, db, products, deductions, refusals).await;
    locks.release().await;
    result
}

async fn apply_under(
    locks: &Locks,
    db: &PgPool,
    products: &[ProductId],
    deductions: &[NewDeduction<'_>],
    refusals: &Refusals,
) -> Result<Vec<Verdict>, AttemptError> {
    // A lock that expired while its holder was paused: give it up before writing anything.
    locks.ensure_held()?;
    let mut conn = db.acquire().await?;
    Ok(queries::apply_batch(&mut conn, products, deductions, refusals).await?)
}

fn answer(verdict: Verdict) -> Answer {
    match verdict {
        Verdict::First(stored) => response::first(stored),
        Verdict::Same(stored) | Verdict::Stored(stored) => response::replay(stored),
        Verdict::Reused => Err(reused()),
    }
}

/// The same failure for every request of the batch. Only the first carries the cause, so a
/// 5xx is logged with its cause once.
fn failed(error: DeductionError, size: usize) -> Vec<Answer> {
    match error {
        DeductionError::Busy(detail) => (0..size)
            .map(|_| Err(DeductionError::Busy(detail.clone())))
            .collect(),
        other => {
            let mut answers = vec![Err(other)];
            answers.extend((1..size).map(|_| {
                Err(anyhow!("another deduction of the same batch failed the batch").into())
            }));
            answers
        }
    }
}
