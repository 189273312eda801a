//! The judging of one batch of deductions, in memory and in arrival order, as if the requests
//! had come one at a time:
//!
//! - an id stored before the batch answers its stored outcome again when its items are the
//!   same (the same fingerprint), else it was reused; a hold id cancelled before its try (a
//!   tombstone) refuses the try;
//! - an id repeated inside the batch answers as its first request did, or was reused;
//! - ids are per kind: a deduction and a hold may share one;
//! - the first request of an id is decided by the stock engine ([`crate::stock::engine`]):
//!   every item against what the earlier requests left, all or nothing.
//!
//! Nothing is written here.

use std::collections::HashMap;

use shared::events::LineItem;

use super::queries::{Stored, StoredDeduction};
use super::request::Kind;
use crate::stock::engine::{Ledger, Refusal};

/// A request as the judge sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub kind: Kind,
    pub id: &'a str,
    pub fingerprint: &'a str,
    pub items: &'a [LineItem],
}

/// What one request of a batch got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// The first request of its id: taken, or refused by the engine.
    First(Result<(), Refusal>),
    /// Repeats, with the same items, the request at this index of the batch.
    Same(usize),
    /// Its id was stored before the batch, with the same items.
    Stored(StoredDeduction),
    /// Its id was used before (stored, or earlier in this batch) with other items.
    Reused,
    /// A hold whose cancel came before its try: refused, holding nothing.
    Cancelled,
}

/// Judges `batch` in order; `stored` holds the outcomes of its ids stored before it, `stock`
/// the batch's products as read (and, after, as the batch left them).
pub fn judge(
    batch: &[Candidate<'_>],
    stored: &HashMap<(Kind, String), Stored>,
    stock: &mut Ledger,
) -> Vec<Judged> {
    let mut firsts: HashMap<(Kind, &str), usize> = HashMap::new();
    let mut judged = Vec::with_capacity(batch.len());
    for (index, candidate) in batch.iter().enumerate() {
        let same_items = |fingerprint: &str| fingerprint == candidate.fingerprint;
        let key = (candidate.kind, candidate.id);
        let verdict = if let Some(before) = stored.get(&(key.0, key.1.to_owned())) {
            match before {
                Stored::First {
                    fingerprint,
                    outcome,
                } if same_items(fingerprint) => Judged::Stored(outcome.clone()),
                Stored::First { .. } => Judged::Reused,
                Stored::Cancelled => Judged::Cancelled,
            }
        } else if let Some(&first) = firsts.get(&key) {
            if same_items(batch[first].fingerprint) {
                Judged::Same(first)
            } else {
                Judged::Reused
            }
        } else {
            firsts.insert(key, index);
            Judged::First(stock.take(candidate.items))
        };
        judged.push(verdict);
    }
    judged
}

#[cfg(test)]
mod tests {
    use shared::events::RejectionReason;
    use shared::ids::ProductId;

    use super::*;
    use crate::deductions::request::DeductionStatus;
    use crate::stock::queries::StockRow;

    fn items(quantity: i64) -> Vec<LineItem> {
        vec![LineItem {
            product_id: ProductId(7),
            quantity,
        }]
    }

    fn stored_applied() -> StoredDeduction {
        StoredDeduction {
            status: DeductionStatus::Applied,
            rejection_reason: None,
            response_status: 200,
            response_body: b"{}".to_vec(),
        }
    }

    #[test]
    fn repeats_answer_as_their_first_request_and_take_nothing() {
        let (one, two) = (items(1), items(2));
        let candidate = |id, fingerprint, items| Candidate {
            kind: Kind::Sale,
            id,
            fingerprint,
            items,
        };
        let batch = [
            candidate("old", "one", &one),
            candidate("old", "two", &two),
            candidate("a", "one", &one),
            candidate("a", "one", &one),
            candidate("a", "two", &two),
            candidate("b", "two", &two),
        ];
        let stored = HashMap::from([(
            (Kind::Sale, "old".to_owned()),
            Stored::First {
                fingerprint: "one".to_owned(),
                outcome: stored_applied(),
            },
        )]);
        let mut stock = Ledger::new([(
            ProductId(7),
            StockRow {
                stock: 2,
                version: 0,
            },
        )]);
        let short = Refusal {
            reason: RejectionReason::InsufficientStock,
            product_id: ProductId(7),
        };
        assert_eq!(
            judge(&batch, &stored, &mut stock),
            vec![
                Judged::Stored(stored_applied()),
                Judged::Reused,
                Judged::First(Ok(())),
                Judged::Same(2),
                Judged::Reused,
                Judged::First(Err(short)),
            ]
        );
        assert_eq!(stock.left(ProductId(7)), Some(1), "only \"a\" took stock");
    }
}
