//! Applying one batch of deductions for one product set:
//! ```text
//! let locks = locker.acquire_all(&products).await?;   // once per attempt; may be bypassed
//! locks.ensure_held()?;                               // lost while waiting? try again
//! SELECT stock … UNION ALL stored outcomes …          // round trip 1: what the batch judges against
//! judge every request in arrival order                // in memory, by the stock engine's rules
//! WITH changed AS (UPDATE …), recorded AS (INSERT …)  // round trip 2: all of it or nothing, committed
//! locks.release(); answer every request
//! ```
//! Each statement runs in its own implicit transaction. The read is a snapshot, not a lock:
//! the write changes a product only if it still has the version read, and records an id only
//! if no other writer did meanwhile; either miss undoes the write with a serialization
//! failure, retried with backoff ([`Retry`]) until 503 `busy` (the next read then sees what
//! the other writer did, and replays its id). When the write returns, the batch is committed,
//! durably (`synchronous_commit` stays on), and only then is anyone answered. A batch of
//! replays only reads.
//!
//! The steady state of a hot product costs one round trip: a leader remembers the stock its
//! last batch left ([`Remembered`]), and its next batch of the same products is judged against
//! that and goes straight to the write, which also checks that every product still has the
//! remembered version. When one does not (another process, a restock, a reservation), or when
//! an id of the batch was stored before it (a replay: the memory knows no stored ids), the
//! write fails having written nothing, and the batch reads and is judged again at once, under
//! the same locks.
//!
//! The Redis lock keeps batches of several processes from judging the same stock at once, so
//! that misses stay rare; it is not what keeps stock correct. A lock lost during the attempt
//! cannot make it write on a stale read: the version check refuses it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use anyhow::anyhow;
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use shared::ids::ProductId;
use sqlx::{PgConnection, PgPool};

use super::error::DeductionError;
use super::judge::{self, Candidate, Judged};
use super::queries::{self, NewDeduction, NewHold, Outcomes, StoredDeduction};
use super::queue::{Counters, Waiter};
use super::request::{DeductionRequest, DeductionStatus, Kind, Take};
use super::response::{self, Answer};
use super::retry::{AttemptError, Retry};
use crate::metrics;
use crate::stock::engine::Ledger;
use crate::stock::lock::{Locker, Locks};
use crate::stock::queries::StockRow;

/// A request of a batch, with the fingerprint of its items.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub request: &'a DeductionRequest,
    pub fingerprint: &'a str,
}

/// What one request of a batch got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The first request with its id: its outcome was recorded now, and is answered.
    First(StoredDeduction),
    /// Repeats, with the same items, an id first used earlier in the same batch.
    Same(StoredDeduction),
    /// Its id was recorded before this batch, with the same items.
    Stored(StoredDeduction),
    /// Its id was used before (stored, or earlier in this batch) with other items.
    Reused,
    /// A hold's try that came after its cancel (a tombstone).
    Cancelled,
}

/// The stock of a batch's products as the previous batch of the same leader left them, with
/// the versions its write gave them. A batch judged against it skips the read; its write
/// checks that every product still has that version, so a stale memory costs a read, never
/// a wrong answer.
pub type Remembered = Vec<(ProductId, StockRow)>;

/// What one attempt decided, and the stock it left for the next batch to remember.
#[derive(Debug)]
pub struct Attempted {
    pub verdicts: Vec<Verdict>,
    /// `None` when a product of the batch does not exist (a batch then always reads).
    pub left: Option<Remembered>,
}

/// Applies `batch` (every request for the same products) and answers each request; also
/// returns the stock it left, for the next batch of the same products to start from.
pub(super) async fn run(
    db: &PgPool,
    locker: &Locker,
    counters: &Counters,
    batch: &[Waiter],
    mut remembered: Option<Remembered>,
) -> (Vec<Answer>, Option<Remembered>) {
    let entries: Vec<Entry<'_>> = batch
        .iter()
        .map(|w| Entry {
            request: &w.request,
            fingerprint: &w.fingerprint,
        })
        .collect();
    let products = products_of(&entries);
    let mut retry = Retry::new(locker.options().wait);
    loop {
        match attempt(db, locker, &products, &entries, remembered.take()).await {
            Err(error) if error.is_retryable() && retry.pause().await => {
                if matches!(error, AttemptError::Refused(DeductionError::Database(_))) {
                    metrics::version_conflict();
                }
                tracing::debug!(%error, size = batch.len(), "retrying a batch of deductions");
            }
            Ok(Attempted { verdicts, left }) => {
                if verdicts.iter().any(|v| matches!(v, Verdict::First(_))) {
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                }
                let answers = verdicts
                    .into_iter()
                    .zip(batch)
                    .map(|(verdict, w)| response::answer(verdict, w.request.take.kind()))
                    .collect();
                return (answers, left);
            }
            Err(error) => return (response::failed(error.into(), batch.len()), None),
        }
    }
}

/// The products of a batch: those of its first request, which every other one shares.
fn products_of(entries: &[Entry<'_>]) -> Vec<ProductId> {
    entries
        .first()
        .map(|e| e.request.items.product_ids())
        .unwrap_or_default()
}

async fn attempt(
    db: &PgPool,
    locker: &Locker,
    products: &[ProductId],
    entries: &[Entry<'_>],
    remembered: Option<Remembered>,
) -> Result<Attempted, AttemptError> {
    let locks = locker.acquire_all(products).await?;
    let result = apply_under(&locks, db, entries, remembered).await;
    locks.release().await;
    result
}

async fn apply_under(
    locks: &Locks,
    db: &PgPool,
    entries: &[Entry<'_>],
    remembered: Option<Remembered>,
) -> Result<Attempted, AttemptError> {
    // A lock that expired while its holder was paused: give it up before writing anything.
    locks.ensure_held()?;
    let mut conn = db.acquire().await?;
    if remembered.is_some() {
        match apply_on(&mut conn, entries, remembered).await {
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
    Ok(apply_on(&mut conn, entries, None).await?)
}

/// One attempt at a batch on `conn`, without lock or retry: reads, judges every request in
/// order and records the outcomes with the stock change. Every request must name the same
/// products; a batch that mixes product sets is refused before anything is read.
pub async fn apply_once(
    conn: &mut PgConnection,
    entries: &[Entry<'_>],
) -> Result<Vec<Verdict>, DeductionError> {
    Ok(apply_on(conn, entries, None).await?.verdicts)
}

/// [`apply_once`], judged against `remembered` instead of a read when given: one statement,
/// the write, which fails with a serialization failure (writing nothing) when a product no
/// longer has the remembered version or an id of the batch was stored before it (the memory
/// knows no stored ids).
pub async fn apply_on(
    conn: &mut PgConnection,
    entries: &[Entry<'_>],
    remembered: Option<Remembered>,
) -> Result<Attempted, DeductionError> {
    let products = products_of(entries);
    if entries
        .iter()
        .any(|e| e.request.items.product_ids() != products)
    {
        return Err(anyhow!("a deduction joined a batch for other products").into());
    }
    let ids_of = |kind: Kind| -> Vec<&str> {
        entries
            .iter()
            .filter(|e| e.request.take.kind() == kind)
            .map(|e| e.request.id.as_str())
            .collect()
    };
    // Judged against the memory, the write checks every product still has its version.
    let (read, judged_at) = match remembered {
        Some(rows) => (
            queries::Read {
                stock: rows.clone(),
                stored: HashMap::new(),
            },
            rows,
        ),
        None => {
            let (sales, holds) = (ids_of(Kind::Sale), ids_of(Kind::Hold));
            (
                queries::read(conn, &products, &sales, &holds).await?,
                Vec::new(),
            )
        }
    };
    let mut stock = Ledger::new(read.stock);
    let candidates: Vec<Candidate<'_>> = entries
        .iter()
        .map(|e| Candidate {
            kind: e.request.take.kind(),
            id: e.request.id.as_str(),
            fingerprint: e.fingerprint,
            items: e.request.items.as_slice(),
        })
        .collect();
    // One clock reading stamps every hold of the batch: the moment it is judged.
    let now = Utc::now().trunc_subsecs(6);
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(entries.len());
    for (judged, entry) in judge::judge(&candidates, &read.stored, &mut stock)
        .into_iter()
        .zip(entries)
    {
        verdicts.push(match judged {
            Judged::First(taken) => Verdict::First(response::outcome(entry.request, taken, now)?),
            Judged::Same(first) => match &verdicts[first] {
                Verdict::First(outcome) => Verdict::Same(outcome.clone()),
                _ => return Err(anyhow!("a repeat that points at no first request").into()),
            },
            Judged::Stored(stored) => Verdict::Stored(stored),
            Judged::Reused => Verdict::Reused,
            Judged::Cancelled => Verdict::Cancelled,
        });
    }
    let new = new_outcomes(entries, &verdicts, now);
    if !new.is_empty() {
        queries::record(conn, &judged_at, &stock.changes(), &new).await?;
    }
    Ok(Attempted {
        verdicts,
        left: stock.after_write(&products),
    })
}

/// The first outcomes of a batch, as [`queries::record`] writes them.
fn new_outcomes<'a>(
    entries: &[Entry<'a>],
    verdicts: &'a [Verdict],
    now: DateTime<Utc>,
) -> Outcomes<'a> {
    let mut new = Outcomes::default();
    for (verdict, entry) in verdicts.iter().zip(entries) {
        let Verdict::First(outcome) = verdict else {
            continue;
        };
        let (id, fingerprint) = (entry.request.id.as_str(), entry.fingerprint);
        let items = entry.request.items.canonical_json();
        match entry.request.take {
            Take::Sale => new.deductions.push(NewDeduction {
                deduction_id: id,
                fingerprint,
                items,
                outcome,
            }),
            Take::Hold { ttl_secs } => new.holds.push(NewHold {
                hold_id: id,
                fingerprint,
                items,
                outcome,
                held: (outcome.status == DeductionStatus::Applied)
                    .then(|| entry.request.items.as_slice()),
                created_at: now,
                expires_at: now + TimeDelta::seconds(ttl_secs),
            }),
        }
    }
    new
}
