//! The stock a writer reads (stock and version) and the changes it decided
//! ([`super::engine::Ledger::changes`]). Each writer sends them inside its one write statement
//! (`crate::reservations::queries::write_batch`, `crate::deductions::queries::record`), as a
//! conditional update that only changes a row unchanged since the read and keeps its stock
//! non-negative.
//!
//! This, not the Redis lock, is what keeps stock correct: a writer holding a stale read (a
//! lock holder paused past its TTL, two holders while Redis lost its keys, no lock at all
//! while Redis is down) updates no row, re-reads and decides again.

use std::collections::HashSet;

use shared::ids::ProductId;

/// A product's stock and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub stock: i64,
    pub version: i64,
}

/// The stock a batch of order events may change, as read.
#[derive(Debug, Clone, Default)]
pub struct StockRead {
    /// The products free, with their stock and version: the batch may change these.
    pub rows: Vec<(ProductId, StockRow)>,
    /// Products that exist but another transaction holds: the work that needs one of them
    /// waits for a later batch.
    pub busy: HashSet<ProductId>,
}

/// A change of one product's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub product_id: ProductId,
    /// Added to the stock (negative for a deduction).
    pub delta: i64,
    /// The version the decision was based on; `None` for a give-back decided without reading
    /// the row (an increment cannot oversell, so it needs no lock and checks no version; the
    /// version bump makes a concurrent deduction re-read and retry).
    pub version: Option<i64>,
}

/// The same stock row as MySQL's statements take and return it.
impl From<StockRow> for inventory_mysql::StockRow {
    fn from(row: StockRow) -> Self {
        Self {
            stock: row.stock,
            version: row.version,
        }
    }
}

impl From<inventory_mysql::StockRow> for StockRow {
    fn from(row: inventory_mysql::StockRow) -> Self {
        Self {
            stock: row.stock,
            version: row.version,
        }
    }
}

impl From<Change> for inventory_mysql::Change {
    fn from(change: Change) -> Self {
        Self {
            product_id: change.product_id.0,
            delta: change.delta,
            version: change.version,
        }
    }
}
