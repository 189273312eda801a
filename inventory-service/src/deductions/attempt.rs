//! One attempt at a batch of deductions (and holds' tries, and ends of holds taken here) on
//! one connection, without lock or retry ([`super::batch`] adds those):
//! ```text
//! SELECT stock … UNION ALL stored outcomes …          // round trip 1: what the batch judges against
//! judge every request in arrival order                // in memory, by the stock engine's rules
//! WITH changed AS (UPDATE …), recorded AS (INSERT …)  // round trip 2: all of it or nothing, committed
//! ```
//! On PostgreSQL each statement runs in its own implicit transaction. The read is a
//! snapshot, not a lock: the write changes a product only if it still has the version read,
//! and records an id only if no other writer did meanwhile; either miss undoes the write with
//! a serialization failure. On MySQL, where the write is several statements, the attempt is
//! one transaction and the read locks the products instead ([`queries::AttemptTx`]). When
//! the attempt commits, the batch is durable (`synchronous_commit` stays on), and only then
//! is anyone answered. A batch of replays writes nothing (on MySQL its read still locks the
//! products, until the attempt ends).
//!
//! The steady state of a hot product costs one round trip: a leader remembers the stock its
//! last batch left ([`Remembered`]), and its next batch of the same products is judged against
//! that and goes straight to the write, which also checks that every product still has the
//! remembered version. When one does not (another process, a restock, a reservation), or when
//! an id of the batch was stored before it (a replay: the memory knows no stored ids), the
//! write fails having written nothing, and the batch reads and is judged again at once, under
//! the same locks.

use std::collections::HashMap;

use anyhow::anyhow;
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use platform::storage::Conn;
use shared::ids::ProductId;

use super::error::DeductionError;
use super::judge::{self, Candidate, Judged};
use super::queries::{self, NewDeduction, NewHold, Outcomes};
use super::request::{DeductionRequest, DeductionStatus, Kind, Take};
use super::response;
use super::verdict::Verdict;
use crate::holds::held_here::Placed;
use crate::holds::queries::HoldRow;
use crate::holds::step::Step;
use crate::stock::engine::Ledger;
use crate::stock::queries::StockRow;

/// A request of a batch, with the fingerprint of its items.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub request: &'a DeductionRequest,
    pub fingerprint: &'a str,
}

/// The stock of a batch's products as the previous batch of the same leader left them, with
/// the versions its write gave them. A batch judged against it skips the read; its write
/// checks that every product still has that version, so a stale memory costs a read, never
/// a wrong answer.
pub type Remembered = Vec<(ProductId, StockRow)>;

/// A confirm or cancel of a hold on exactly the batch's products, taken by this process
/// (`crate::holds::held_here`): it rides in the batch's statement instead of a commit of its
/// own, and a cancel's give-back goes into the batch's own update of the products, so the
/// stock the leader remembers stays true.
#[derive(Debug, Clone, Copy)]
pub struct End<'a> {
    pub step: Step,
    pub hold_id: &'a str,
}

/// What one attempt decided, and the stock it left for the next batch to remember.
#[derive(Debug, Default)]
pub struct Attempted {
    pub verdicts: Vec<Verdict>,
    /// `None` when a product of the batch does not exist (a batch then always reads).
    pub left: Option<Remembered>,
    /// The ends that changed their hold, as the statement left it.
    pub decided: Vec<HoldRow>,
    /// The holds this batch took `HELD`, for their ends to find the batch of their products.
    pub placed: Vec<(String, Placed)>,
    /// Whether the attempt read the stock (rather than trusting the memory or needing none).
    pub read: bool,
    /// Whether it wrote (and so committed) anything.
    pub wrote: bool,
}
/// The products of a batch: those of its first request, which every other one shares.
fn products_of(entries: &[Entry<'_>]) -> Vec<ProductId> {
    entries
        .first()
        .map(|e| e.request.items.product_ids())
        .unwrap_or_default()
}
/// One attempt at a batch on `conn`, without lock, retry or ends: reads, judges every
/// request in order and records the outcomes with the stock change. Every request must name
/// the same products; a batch that mixes product sets is refused before anything is read.
pub async fn apply_once(
    conn: Conn<'_>,
    entries: &[Entry<'_>],
) -> Result<Vec<Verdict>, DeductionError> {
    let products = products_of(entries);
    Ok(apply_on(conn, &products, entries, &[], None)
        .await?
        .verdicts)
}

/// [`apply_once`] for the requests and ends of a batch on `products`, judged against
/// `remembered` instead of a read when given: one statement, the write, which fails with a
/// serialization failure (writing nothing) when a product no longer has the remembered
/// version or an id of the batch was stored before it (the memory knows no stored ids). A
/// batch of ends alone reads nothing: a confirm touches no stock, and a cancel's give-back is
/// an increment the statement counts itself.
pub async fn apply_on(
    conn: Conn<'_>,
    products: &[ProductId],
    entries: &[Entry<'_>],
    ends: &[End<'_>],
    remembered: Option<Remembered>,
) -> Result<Attempted, DeductionError> {
    if entries
        .iter()
        .any(|e| e.request.items.product_ids() != products)
    {
        return Err(anyhow!("a deduction joined a batch for other products").into());
    }
    let mut tx = queries::AttemptTx::begin(conn).await?;
    match judge_and_record(&mut tx, products, entries, ends, remembered).await {
        Ok(attempted) => {
            tx.commit().await?;
            Ok(attempted)
        }
        Err(error) => {
            // Now, not when the connection is next used: a leader keeps its connection
            // through its retry's pause, and the rows the attempt locked would stay locked
            // for other instances until then.
            tx.rollback().await;
            Err(error)
        }
    }
}

/// The body of [`apply_on`], in `tx`: reads (or remembers), judges and records.
async fn judge_and_record(
    tx: &mut queries::AttemptTx<'_>,
    products: &[ProductId],
    entries: &[Entry<'_>],
    ends: &[End<'_>],
    remembered: Option<Remembered>,
) -> Result<Attempted, DeductionError> {
    let ids_of = |kind: Kind| -> Vec<&str> {
        entries
            .iter()
            .filter(|e| e.request.take.kind() == kind)
            .map(|e| e.request.id.as_str())
            .collect()
    };
    // Judged against the memory, the write checks every product still has its version.
    let mut read_now = false;
    let (read, judged_at) = match remembered {
        Some(rows) => (
            queries::Read {
                stock: rows.clone(),
                stored: HashMap::new(),
            },
            rows,
        ),
        None if entries.is_empty() => (queries::Read::default(), Vec::new()),
        None => {
            let (sales, holds) = (ids_of(Kind::Sale), ids_of(Kind::Hold));
            read_now = true;
            (
                queries::read(tx, products, &sales, &holds).await?,
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
    // One reading of the database's clock, the one that judges deadlines, stamps every hold
    // of the batch: the moment it is judged. A batch of deductions alone needs none.
    let now = if entries.iter().any(|e| e.request.take.kind() == Kind::Hold) {
        queries::clock(tx).await?
    } else {
        Utc::now()
    }
    .trunc_subsecs(6);
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
    let mut new = new_outcomes(entries, &verdicts, now);
    for end in ends {
        match end.step {
            Step::Confirm => new.confirms.push(end.hold_id),
            Step::Cancel => new.cancels.push(end.hold_id),
        }
    }
    let mut attempted = Attempted {
        left: stock.after_write(products),
        placed: placed(products, &new),
        read: read_now,
        ..Attempted::default()
    };
    if !new.is_empty() {
        let changes = if new.cancels.is_empty() {
            stock.changes()
        } else {
            stock.changes_including(products)
        };
        let recorded = queries::record(tx, &judged_at, &changes, &new).await?;
        attempted.left = left_after(products, attempted.left, &recorded.written);
        attempted.decided = recorded.decided;
        attempted.wrote = true;
    }
    attempted.verdicts = verdicts;
    Ok(attempted)
}

/// The holds a batch takes `HELD`, with what routes their ends back to its products.
fn placed(products: &[ProductId], new: &Outcomes<'_>) -> Vec<(String, Placed)> {
    new.holds
        .iter()
        .filter(|hold| hold.held.is_some())
        .map(|hold| {
            let placed = Placed {
                products: products.to_vec(),
                expires_at: hold.expires_at,
            };
            (hold.hold_id.to_owned(), placed)
        })
        .collect()
}

/// The stock a batch leaves: what the statement returned for every product it wrote (a
/// cancel's give-back is counted there, not in the ledger), the ledger's for the others.
fn left_after(
    products: &[ProductId],
    judged: Option<Remembered>,
    written: &[(ProductId, StockRow)],
) -> Option<Remembered> {
    products
        .iter()
        .map(|id| {
            let row = written
                .iter()
                .chain(judged.iter().flatten())
                .find(|(product, _)| product == id)?;
            Some(*row)
        })
        .collect()
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
