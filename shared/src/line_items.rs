//! The line-item rules both services hold an order or a deduction to (docs/contract.md §3.1, §3.2):
//! 1 to 100 items, positive product ids, 1 ≤ quantity ≤ 1,000,000, no product twice.
//!
//! Written once here so that what order-service accepts, what `POST /deductions` accepts and
//! what inventory takes as a valid `order.created` can never drift apart.

use std::collections::HashSet;
use std::fmt;

use crate::events::LineItem;
use crate::ids::ProductId;

pub const MAX_ITEMS: usize = 100;
pub const MAX_QUANTITY: i64 = 1_000_000;

/// The first rule a list of items breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineItemsError {
    /// Empty, or more than [`MAX_ITEMS`].
    Count(usize),
    /// `items[index]` names a product id below 1.
    ProductId { index: usize, got: i64 },
    /// `items[index]` asks for a quantity outside 1..=[`MAX_QUANTITY`].
    Quantity { index: usize, got: i64 },
    /// The product appears more than once.
    Duplicate(ProductId),
}

impl fmt::Display for LineItemsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count(n) => write!(f, "items must hold 1 to {MAX_ITEMS} entries, got {n}"),
            Self::ProductId { index, got } => write!(
                f,
                "items[{index}]: product_id must be a positive integer, got {got}"
            ),
            Self::Quantity { index, got } => write!(
                f,
                "items[{index}]: quantity must be between 1 and {MAX_QUANTITY}, got {got}"
            ),
            Self::Duplicate(product) => {
                write!(f, "product {} appears more than once in items", product.0)
            }
        }
    }
}

impl std::error::Error for LineItemsError {}

/// Checks `(product_id, quantity)` pairs as a client sent them; the items keep their order.
pub fn parse(raw: impl IntoIterator<Item = (i64, i64)>) -> Result<Vec<LineItem>, LineItemsError> {
    let items: Vec<LineItem> = raw
        .into_iter()
        .map(|(product_id, quantity)| LineItem {
            product_id: ProductId(product_id),
            quantity,
        })
        .collect();
    check(&items)?;
    Ok(items)
}

/// Checks items that are already typed (an event's payload, say).
pub fn check(items: &[LineItem]) -> Result<(), LineItemsError> {
    if items.is_empty() || items.len() > MAX_ITEMS {
        return Err(LineItemsError::Count(items.len()));
    }
    let mut seen = HashSet::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        if item.product_id.0 < 1 {
            return Err(LineItemsError::ProductId {
                index,
                got: item.product_id.0,
            });
        }
        if !(1..=MAX_QUANTITY).contains(&item.quantity) {
            return Err(LineItemsError::Quantity {
                index,
                got: item.quantity,
            });
        }
        if !seen.insert(item.product_id) {
            return Err(LineItemsError::Duplicate(item.product_id));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_items_keep_their_order() {
        let items = parse([(3, 1), (1, MAX_QUANTITY)]).expect("valid");
        let ids: Vec<i64> = items.iter().map(|i| i.product_id.0).collect();
        assert_eq!(ids, vec![3, 1]);
        let hundred: Vec<(i64, i64)> = (1..=100).map(|id| (id, 1)).collect();
        assert!(parse(hundred).is_ok());
    }

    #[test]
    fn each_rule_is_enforced() {
        let too_many: Vec<(i64, i64)> = (1..=101).map(|id| (id, 1)).collect();
        let cases: Vec<(Vec<(i64, i64)>, LineItemsError)> = vec![
            (vec![], LineItemsError::Count(0)),
            (too_many, LineItemsError::Count(101)),
            (
                vec![(1, 1), (0, 1)],
                LineItemsError::ProductId { index: 1, got: 0 },
            ),
            (
                vec![(-4, 1)],
                LineItemsError::ProductId { index: 0, got: -4 },
            ),
            (vec![(1, 0)], LineItemsError::Quantity { index: 0, got: 0 }),
            (
                vec![(1, MAX_QUANTITY + 1)],
                LineItemsError::Quantity {
                    index: 0,
                    got: MAX_QUANTITY + 1,
                },
            ),
            (
                vec![(1, 1), (2, 1), (1, 5)],
                LineItemsError::Duplicate(ProductId(1)),
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(parse(raw.clone()), Err(expected), "{raw:?}");
        }
    }
}
