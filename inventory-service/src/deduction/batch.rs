//! Applying one batch of deductions for one product set:
//! ```text
//! let locks = locker.acquire_all(&products).await?;   // once per batch; may be bypassed
//! begin; read stock and versions; read the stored ids of the batch
//! judge every request in arrival order                // pure, see `judge`
//! write every new outcome + the stock change          // one statement, conditional update
//! locks.ensure_held()?;                                // lost? roll back, retry
//! commit; answer every request; locks.release()
//! ```
//! A version that moved (a restock, a reservation) or an id recorded meanwhile by another
//! writer rolls the transaction back; the batch is read and judged again under the same
//! lock, then, after [`db::stock::MAX_VERSION_RETRIES`], again under a new lock with
//! backoff ([`Retry`]) until 503 `busy`.

use std::collections::HashMap;

use anyhow::anyhow;
use shared::ids::ProductId;
use sqlx::PgPool;

use super::judge::{self, Judgement, Pending, Verdict};
use super::queue::{Counters, Waiter};
use super::response::{first_response, recorded_as, replay, reused};
use super::retry::{AttemptError, Retry};
use crate::db;
use crate::db::deductions::{NewDeduction, StoredDeduction};
use crate::db::stock::StockError;
use crate::domain::deduction::Outcome;
use crate::error::ApiError;
use crate::lock::{Locker, Locks};
use crate::metrics;
use crate::replay::StoredResponse;

type Answer = Result<StoredResponse, ApiError>;

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
    let mut retry = Retry::new(locker.options().wait);
    loop {
        match attempt(db, locker, counters, &products, batch).await {
            Err(error) if error.is_retryable() && retry.pause().await => {
                tracing::debug!(%error, size = batch.len(), "retrying a batch of deductions");
            }
            Ok(answers) => return answers,
            Err(error) => return failed(error.into(), batch.len()),
        }
    }
}

async fn attempt(
    db: &PgPool,
    locker: &Locker,
    counters: &Counters,
    products: &[ProductId],
    batch: &[Waiter],
) -> Result<Vec<Answer>, AttemptError> {
    let locks = locker.acquire_all(products).await?;
    let result = apply_under(&locks, db, counters, products, batch).await;
    locks.release().await;
    result
}

/// Applies the batch under `locks`; [`StockError::Contended`] when the rows kept changing.
async fn apply_under(
    locks: &Locks,
    db: &PgPool,
    counters: &Counters,
    products: &[ProductId],
    batch: &[Waiter],
) -> Result<Vec<Answer>, AttemptError> {
    let pending: Vec<Pending<'_>> = batch
        .iter()
        .map(|w| Pending {
            id: w.request.id.as_str(),
            fingerprint: &w.fingerprint,
            items: w.request.items.as_slice(),
        })
        .collect();
    let ids: Vec<&str> = pending.iter().map(|p| p.id).collect();
    for _ in 0..=db::stock::MAX_VERSION_RETRIES {
        let mut tx = db.begin().await?;
        let stock = db::deductions::read_stock(&mut tx, products).await?;
        let stored = db::deductions::find_many(&mut tx, &ids).await?;
        let judgement = judge::judge(&pending, &stock, &stored);
        let firsts = first_responses(batch, &judgement)?;
        let rows: Vec<NewDeduction<'_>> = firsts
            .iter()
            .map(|(index, outcome, response)| {
                let waiter = &batch[*index];
                recorded_as(&waiter.request, &waiter.fingerprint, *outcome, response)
            })
            .collect();
        if rows.is_empty() {
            // A batch of replays alone writes nothing; its transaction only read.
            tx.rollback().await?;
        } else {
            let written = db::deductions::write_batch(&mut tx, &judgement.changes, &rows).await?;
            if written.changed < count(judgement.changes.len())
                || written.recorded < count(rows.len())
            {
                // A row moved since the read, or another writer took one of these ids: what
                // was judged no longer holds. Undo everything and judge again.
                tx.rollback().await?;
                metrics::version_conflict();
                continue;
            }
            locks.ensure_held()?;
            tx.commit().await?;
            counters
                .commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for (_, outcome, _) in &firsts {
            metrics::deduction(match outcome {
                Outcome::Applied => "applied",
                Outcome::Rejected { reason, .. } => reason.as_str(),
            });
        }
        return Ok(answers(batch, &judgement, firsts, &stored));
    }
    let product = products.first().copied().unwrap_or(ProductId(0));
    Err(StockError::Contended(product).into())
}

/// The first requests of their ids: index in the batch, outcome and response.
fn first_responses(
    batch: &[Waiter],
    judgement: &Judgement,
) -> Result<Vec<(usize, Outcome, StoredResponse)>, ApiError> {
    judgement
        .verdicts
        .iter()
        .enumerate()
        .filter_map(|(index, verdict)| match verdict {
            Verdict::First(outcome) => Some(
                first_response(&batch[index].request, *outcome)
                    .map(|response| (index, *outcome, response)),
            ),
            _ => None,
        })
        .collect()
}

fn answers(
    batch: &[Waiter],
    judgement: &Judgement,
    firsts: Vec<(usize, Outcome, StoredResponse)>,
    stored: &HashMap<String, StoredDeduction>,
) -> Vec<Answer> {
    let firsts: HashMap<usize, StoredResponse> = firsts
        .into_iter()
        .map(|(index, _, response)| (index, response))
        .collect();
    judgement
        .verdicts
        .iter()
        .enumerate()
        .map(|(index, verdict)| match verdict {
            Verdict::First(_) => firsts
                .get(&index)
                .cloned()
                .ok_or_else(|| anyhow!("a first deduction lost its response").into()),
            Verdict::SameAs(first) => {
                let first = firsts
                    .get(first)
                    .ok_or_else(|| anyhow!("a repeated deduction id lost its first response"))?;
                metrics::deduction("replayed");
                Ok(StoredResponse::again(first.status, first.body.clone()))
            }
            Verdict::Stored => stored
                .get(batch[index].request.id.as_str())
                .ok_or_else(|| ApiError::from(anyhow!("a stored deduction vanished")))
                .and_then(replay),
            Verdict::Reused => Err(reused()),
        })
        .collect()
}

/// The same failure for every request of the batch. Only the first carries the cause, so a
/// 5xx is logged with its cause once.
fn failed(error: ApiError, size: usize) -> Vec<Answer> {
    match error {
        ApiError::Busy(detail) => (0..size)
            .map(|_| Err(ApiError::Busy(detail.clone())))
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

fn count(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}
