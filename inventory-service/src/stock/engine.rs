//! The stock engine: the one place the rules of taking stock live. Direct deductions, holds'
//! tries and orders' reservations are judged by it, in memory and in arrival order, against
//! the stock read for their batch (or, for a deductions leader's next batch, the stock its
//! last batch left):
//!
//! - a request takes every item or nothing (docs/contract.md §3.2);
//! - it is refused by the first product, in ascending id, that is unknown or short of the
//!   stock the requests before it left; a large request refused does not stop a smaller one
//!   after it;
//! - a give-back adds its units back, to a product read or not (an increment cannot oversell,
//!   so it needs no read).
//!
//! The engine writes nothing. [`Ledger::changes`] (with [`Ledger::changes_including`] the
//! products a batch gives units back to) is what a batch then writes, as conditional updates:
//! a product read changes only if it still has the version it was read at, so a decision made
//! on a row that moved meanwhile is never written (the batch rolls back and is judged again).
//! Reading, judging and writing are separate steps so that the rules are plain Rust, the same
//! on any database, and a batch costs at most one read and one write (on MySQL the write is
//! several statements of one transaction).

use std::collections::BTreeMap;

use shared::events::{LineItem, RejectionReason};
use shared::ids::ProductId;

use super::queries::{Change, StockRow};

/// Why a request took nothing, and the product that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RejectionReason,
    pub product_id: ProductId,
}

/// The stock of one batch: each product as read, and what the batch has taken from it or
/// given back so far.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    read: BTreeMap<ProductId, Entry>,
    /// Units given back to products the batch did not read.
    given_back_unread: BTreeMap<ProductId, i64>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    row: StockRow,
    left: i64,
}

impl Ledger {
    /// The stock of every product the batch read; a product absent here is unknown to
    /// [`Ledger::take`].
    pub fn new(rows: impl IntoIterator<Item = (ProductId, StockRow)>) -> Self {
        let read = rows
            .into_iter()
            .map(|(id, row)| {
                let left = row.stock;
                (id, Entry { row, left })
            })
            .collect();
        Self {
            read,
            given_back_unread: BTreeMap::new(),
        }
    }

    /// The units `product_id` has left after the batch so far; `None` when it was not read.
    pub fn left(&self, product_id: ProductId) -> Option<i64> {
        self.read.get(&product_id).map(|entry| entry.left)
    }

    /// Takes every item of `items`, or nothing. A product named twice is judged on the sum
    /// of its quantities.
    pub fn take(&mut self, items: &[LineItem]) -> Result<(), Refusal> {
        let wanted = per_product(items);
        for (&product_id, &quantity) in &wanted {
            let reason = match self.read.get(&product_id) {
                None => RejectionReason::UnknownProduct,
                Some(entry) if entry.left < quantity => RejectionReason::InsufficientStock,
                Some(_) => continue,
            };
            return Err(Refusal { reason, product_id });
        }
        for (product_id, quantity) in wanted {
            if let Some(entry) = self.read.get_mut(&product_id) {
                entry.left -= quantity;
            }
        }
        Ok(())
    }

    /// Gives back every unit of `items`.
    pub fn give_back(&mut self, items: &[LineItem]) {
        for (product_id, quantity) in per_product(items) {
            match self.read.get_mut(&product_id) {
                Some(entry) => entry.left += quantity,
                None => *self.given_back_unread.entry(product_id).or_default() += quantity,
            }
        }
    }

    /// What the batch changed, one change per product in ascending id: the products read
    /// carry the version they were read at; give-backs to products not read carry none.
    pub fn changes(&self) -> Vec<Change> {
        let read = self
            .read
            .iter()
            .filter(|(_, entry)| entry.left != entry.row.stock)
            .map(|(&product_id, entry)| Change {
                product_id,
                delta: entry.left - entry.row.stock,
                version: Some(entry.row.version),
            });
        let unread = self
            .given_back_unread
            .iter()
            .map(|(&product_id, &delta)| Change {
                product_id,
                delta,
                version: None,
            });
        let mut changes: Vec<Change> = read.chain(unread).collect();
        changes.sort_by_key(|change| change.product_id);
        changes
    }

    /// [`Ledger::changes`], plus a change of nothing for every product of `products` it does
    /// not change (with the version read, or none when not read): a write that adds units
    /// decided elsewhere (a cancel's give-back, counted by the statement itself) still writes
    /// each of them once, under the same version check.
    pub fn changes_including(&self, products: &[ProductId]) -> Vec<Change> {
        let mut changes = self.changes();
        for &product_id in products {
            if changes.iter().all(|change| change.product_id != product_id) {
                changes.push(Change {
                    product_id,
                    delta: 0,
                    version: self.read.get(&product_id).map(|entry| entry.row.version),
                });
            }
        }
        changes.sort_by_key(|change| change.product_id);
        changes
    }

    /// The stock as the batch leaves it once its [`Ledger::changes`] are written: each product
    /// read, with its stock left and the version the write gives it. `None` when the batch did
    /// not read every product of `products` (one is unknown): then there is nothing to trust.
    pub fn after_write(&self, products: &[ProductId]) -> Option<Vec<(ProductId, StockRow)>> {
        products
            .iter()
            .map(|id| {
                let entry = self.read.get(id)?;
                let changed = entry.left != entry.row.stock;
                let row = StockRow {
                    stock: entry.left,
                    version: entry.row.version + i64::from(changed),
                };
                Some((*id, row))
            })
            .collect()
    }
}

fn per_product(items: &[LineItem]) -> BTreeMap<ProductId, i64> {
    let mut wanted = BTreeMap::new();
    for item in items {
        *wanted.entry(item.product_id).or_default() += item.quantity;
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: RejectionReason = RejectionReason::InsufficientStock;
    const UNKNOWN: RejectionReason = RejectionReason::UnknownProduct;

    fn item(product: i64, quantity: i64) -> LineItem {
        LineItem {
            product_id: ProductId(product),
            quantity,
        }
    }

    fn ledger(rows: &[(i64, i64)]) -> Ledger {
        Ledger::new(rows.iter().map(|&(id, stock)| {
            (
                ProductId(id),
                StockRow {
                    stock,
                    version: id * 10,
                },
            )
        }))
    }

    fn refusal(reason: RejectionReason, product: i64) -> Result<(), Refusal> {
        Err(Refusal {
            reason,
            product_id: ProductId(product),
        })
    }

    #[test]
    fn each_request_is_judged_against_what_the_earlier_ones_left() {
        let mut stock = ledger(&[(7, 5)]);
        assert_eq!(stock.take(&[item(7, 2)]), Ok(()));
        assert_eq!(stock.take(&[item(7, 5)]), refusal(SHORT, 7));
        assert_eq!(stock.take(&[item(7, 2)]), Ok(()), "a refusal takes nothing");
        assert_eq!(stock.take(&[item(7, 2)]), refusal(SHORT, 7));
        assert_eq!(stock.left(ProductId(7)), Some(1));
    }

    #[test]
    fn a_request_takes_all_or_nothing_refused_by_the_first_failing_product_ascending() {
        let mut stock = ledger(&[(7, 5), (8, 1)]);
        assert_eq!(stock.take(&[item(8, 9), item(7, 1)]), refusal(SHORT, 8));
        assert_eq!(stock.take(&[item(99, 1), item(8, 9)]), refusal(SHORT, 8));
        assert_eq!(stock.take(&[item(99, 1), item(7, 1)]), refusal(UNKNOWN, 99));
        assert_eq!(stock.take(&[item(7, 1), item(8, 1)]), Ok(()));
        assert_eq!(
            (stock.left(ProductId(7)), stock.left(ProductId(8))),
            (Some(4), Some(0))
        );
    }

    #[test]
    fn a_product_named_twice_is_judged_on_the_sum() {
        let mut stock = ledger(&[(7, 5)]);
        assert_eq!(stock.take(&[item(7, 3), item(7, 3)]), refusal(SHORT, 7));
        assert_eq!(stock.take(&[item(7, 2), item(7, 3)]), Ok(()));
        assert_eq!(stock.left(ProductId(7)), Some(0));
    }

    #[test]
    fn give_backs_count_for_later_requests_and_reach_products_not_read() {
        let mut stock = ledger(&[(7, 0)]);
        stock.give_back(&[item(7, 2), item(9, 4)]);
        assert_eq!(stock.take(&[item(7, 2)]), Ok(()));
        assert_eq!(
            stock.take(&[item(9, 1)]),
            refusal(UNKNOWN, 9),
            "9 was not read"
        );
        assert_eq!(
            stock.changes(),
            vec![Change {
                product_id: ProductId(9),
                delta: 4,
                version: None,
            }],
            "7 is back where it was read, so it does not change"
        );
    }

    #[test]
    fn changes_are_one_per_product_in_ascending_id_with_the_version_read() {
        let mut stock = ledger(&[(8, 5), (7, 5)]);
        stock.take(&[item(8, 1), item(7, 2)]).expect("taken");
        stock.take(&[item(8, 1)]).expect("taken");
        stock.give_back(&[item(3, 1)]);
        let changes: Vec<(i64, i64, Option<i64>)> = stock
            .changes()
            .into_iter()
            .map(|c| (c.product_id.0, c.delta, c.version))
            .collect();
        assert_eq!(
            changes,
            vec![(3, 1, None), (7, -2, Some(70)), (8, -2, Some(80))]
        );
    }

    #[test]
    fn changes_including_products_writes_each_once_with_the_version_read() {
        let mut stock = ledger(&[(7, 5), (8, 5)]);
        stock.take(&[item(8, 1)]).expect("taken");
        let changes: Vec<(i64, i64, Option<i64>)> = stock
            .changes_including(&[ProductId(7), ProductId(8), ProductId(9)])
            .into_iter()
            .map(|c| (c.product_id.0, c.delta, c.version))
            .collect();
        assert_eq!(
            changes,
            vec![(7, 0, Some(70)), (8, -1, Some(80)), (9, 0, None)]
        );
    }

    #[test]
    fn after_a_write_each_product_has_its_stock_left_and_changed_ones_a_new_version() {
        let mut stock = ledger(&[(7, 5), (8, 5)]);
        stock.take(&[item(7, 2)]).expect("taken");
        let after = stock.after_write(&[ProductId(7), ProductId(8)]);
        assert_eq!(
            after,
            Some(vec![
                (
                    ProductId(7),
                    StockRow {
                        stock: 3,
                        version: 71
                    }
                ),
                (
                    ProductId(8),
                    StockRow {
                        stock: 5,
                        version: 80
                    }
                ),
            ])
        );
        assert_eq!(stock.after_write(&[ProductId(7), ProductId(9)]), None);
    }
}
