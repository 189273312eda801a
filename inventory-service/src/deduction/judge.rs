//! Judging a batch: each request in arrival order against the stock the earlier ones left,
//! exactly as if they had come one at a time. Pure: no I/O, so every rule has a unit test.

use std::collections::HashMap;

use shared::events::{LineItem, RejectionReason};
use shared::ids::ProductId;

use crate::db::deductions::{StockChange, StockRow, StoredDeduction};
use crate::domain::deduction::Outcome;

/// One request of a batch, as the judge needs it.
#[derive(Debug, Clone, Copy)]
pub struct Pending<'a> {
    pub id: &'a str,
    pub fingerprint: &'a str,
    /// In ascending product id.
    pub items: &'a [LineItem],
}

/// What one request of a batch gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first request with its id: this outcome is recorded and answered.
    First(Outcome),
    /// Repeats, with the same items, the id of the request at this index of the batch: it
    /// gets that request's answer as a replay and deducts nothing.
    SameAs(usize),
    /// Its id was stored before this batch, with the same items: the stored answer again.
    Stored,
    /// Its id was used before (stored, or earlier in this batch) with other items.
    Reused,
}

/// The verdicts, one per request in order, and the stock they take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub verdicts: Vec<Verdict>,
    /// One per product something was deducted from, with the version it was read at.
    pub changes: Vec<StockChange>,
}

/// Judges `requests` in order against `stock` (the rows that exist) and the ids stored
/// before this batch.
pub fn judge(
    requests: &[Pending<'_>],
    stock: &[StockRow],
    stored: &HashMap<String, StoredDeduction>,
) -> Judgement {
    let mut left: HashMap<i64, i64> = stock.iter().map(|r| (r.product_id, r.stock)).collect();
    let mut first_seen: HashMap<&str, usize> = HashMap::new();
    let mut verdicts = Vec::with_capacity(requests.len());
    for (index, request) in requests.iter().enumerate() {
        let verdict = if let Some(stored) = stored.get(request.id) {
            if stored.fingerprint == request.fingerprint {
                Verdict::Stored
            } else {
                Verdict::Reused
            }
        } else if let Some(&first) = first_seen.get(request.id) {
            if requests[first].fingerprint == request.fingerprint {
                Verdict::SameAs(first)
            } else {
                Verdict::Reused
            }
        } else {
            first_seen.insert(request.id, index);
            Verdict::First(take(&mut left, request.items))
        };
        verdicts.push(verdict);
    }
    let changes = stock
        .iter()
        .filter_map(|row| {
            let taken = row.stock - left.get(&row.product_id).copied().unwrap_or(row.stock);
            (taken > 0).then_some(StockChange {
                product: ProductId(row.product_id),
                quantity: taken,
                version: row.version,
            })
        })
        .collect();
    Judgement { verdicts, changes }
}

/// Deducts every item from `left`, or none: the first item (ascending product id) that is
/// unknown or short decides the rejection.
fn take(left: &mut HashMap<i64, i64>, items: &[LineItem]) -> Outcome {
    for item in items {
        let reason = match left.get(&item.product_id.0) {
            None => RejectionReason::UnknownProduct,
            Some(&units) if units < item.quantity => RejectionReason::InsufficientStock,
            Some(_) => continue,
        };
        return Outcome::Rejected {
            reason,
            product_id: item.product_id,
        };
    }
    for item in items {
        if let Some(units) = left.get_mut(&item.product_id.0) {
            *units -= item.quantity;
        }
    }
    Outcome::Applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::deduction::DeductionStatus;

    fn items(pairs: &[(i64, i64)]) -> Vec<LineItem> {
        pairs
            .iter()
            .map(|&(p, q)| LineItem {
                product_id: ProductId(p),
                quantity: q,
            })
            .collect()
    }

    fn row(product_id: i64, stock: i64) -> StockRow {
        StockRow {
            product_id,
            stock,
            version: 7,
        }
    }

    fn short(product: i64) -> Verdict {
        Verdict::First(Outcome::Rejected {
            reason: RejectionReason::InsufficientStock,
            product_id: ProductId(product),
        })
    }

    const APPLIED: Verdict = Verdict::First(Outcome::Applied);

    #[test]
    fn a_short_request_in_the_middle_does_not_stop_the_ones_after_it() {
        let (small, large) = (items(&[(1, 2)]), items(&[(1, 5)]));
        let requests = [
            Pending {
                id: "a",
                fingerprint: "s",
                items: &small,
            },
            Pending {
                id: "b",
                fingerprint: "l",
                items: &large,
            },
            Pending {
                id: "c",
                fingerprint: "s",
                items: &small,
            },
            Pending {
                id: "d",
                fingerprint: "s",
                items: &small,
            },
        ];
        let judgement = judge(&requests, &[row(1, 5)], &HashMap::new());
        assert_eq!(
            judgement.verdicts,
            vec![APPLIED, short(1), APPLIED, short(1)]
        );
        assert_eq!(
            judgement.changes,
            vec![StockChange {
                product: ProductId(1),
                quantity: 4,
                version: 7
            }]
        );
    }

    #[test]
    fn a_repeated_id_gets_the_first_answer_or_is_refused_with_other_items() {
        let (one, two) = (items(&[(1, 1)]), items(&[(1, 2)]));
        let requests = [
            Pending {
                id: "a",
                fingerprint: "1",
                items: &one,
            },
            Pending {
                id: "a",
                fingerprint: "1",
                items: &one,
            },
            Pending {
                id: "a",
                fingerprint: "2",
                items: &two,
            },
        ];
        let judgement = judge(&requests, &[row(1, 10)], &HashMap::new());
        assert_eq!(
            judgement.verdicts,
            vec![APPLIED, Verdict::SameAs(0), Verdict::Reused]
        );
        assert_eq!(judgement.changes[0].quantity, 1, "deducted once");
    }

    #[test]
    fn an_id_stored_before_is_replayed_and_takes_no_stock() {
        let one = items(&[(1, 1)]);
        let stored = HashMap::from([(
            "old".to_owned(),
            StoredDeduction {
                fingerprint: "1".to_owned(),
                status: DeductionStatus::Applied,
                response_status: 200,
                response_body: b"{}".to_vec(),
            },
        )]);
        let requests = [
            Pending {
                id: "old",
                fingerprint: "1",
                items: &one,
            },
            Pending {
                id: "old",
                fingerprint: "other",
                items: &one,
            },
        ];
        let judgement = judge(&requests, &[row(1, 10)], &stored);
        assert_eq!(judgement.verdicts, vec![Verdict::Stored, Verdict::Reused]);
        assert!(judgement.changes.is_empty());
    }

    #[test]
    fn a_multi_item_request_takes_all_or_nothing_and_names_the_first_failing_product() {
        let (both, too_much) = (items(&[(1, 1), (2, 1)]), items(&[(1, 1), (2, 9)]));
        let ghost = items(&[(1, 1), (3, 1)]);
        let requests = [
            Pending {
                id: "a",
                fingerprint: "x",
                items: &too_much,
            },
            Pending {
                id: "b",
                fingerprint: "y",
                items: &both,
            },
            Pending {
                id: "c",
                fingerprint: "z",
                items: &ghost,
            },
        ];
        let judgement = judge(&requests, &[row(1, 5), row(2, 1)], &HashMap::new());
        let unknown = Verdict::First(Outcome::Rejected {
            reason: RejectionReason::UnknownProduct,
            product_id: ProductId(3),
        });
        assert_eq!(judgement.verdicts, vec![short(2), APPLIED, unknown]);
        let taken: Vec<i64> = judgement.changes.iter().map(|c| c.quantity).collect();
        assert_eq!(taken, vec![1, 1]);
    }
}
