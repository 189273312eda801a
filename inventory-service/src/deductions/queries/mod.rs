//! The tables of what takes stock synchronously — `deductions` (the first outcome of every
//! deduction id) and `holds` (every hold, with its try's first outcome; `crate::holds`) — and
//! the two statements a batch of them costs: [`read`], the stock of its products with the
//! stored outcomes of its ids, and [`record`], the stock change with the new outcomes, all or
//! nothing. A batch that follows another of the same products skips the read (see
//! `super::batch`): one statement then. Both run in an [`AttemptTx`]: on PostgreSQL no
//! transaction, each statement its own, so when [`record`] returns the batch is committed
//! (and, with `synchronous_commit` on, durable); on MySQL one transaction whose read locks the
//! products, committed by [`AttemptTx::commit`].
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use std::collections::HashMap;

use shared::events::RejectionReason;
use shared::ids::ProductId;

use super::request::{DeductionStatus, Kind};
use crate::stock::queries::StockRow;

mod attempt_tx;
mod clock;
mod read;
mod record;

pub use attempt_tx::AttemptTx;
pub use clock::clock;
pub use read::read;
pub use record::{NewDeduction, NewHold, Outcomes, Recorded, record};

/// The first outcome of a deduction id or a hold's try, as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDeduction {
    pub status: DeductionStatus,
    /// Set exactly when `status` is rejected.
    pub rejection_reason: Option<RejectionReason>,
    pub response_status: i16,
    pub response_body: Vec<u8>,
}

/// What an id of a batch was used for before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// A first outcome, with the fingerprint of the request that got it.
    First {
        fingerprint: String,
        outcome: StoredDeduction,
    },
    /// A hold cancelled before its try (a tombstone): the try is refused, holding nothing.
    Cancelled,
}

/// What a batch reads before it is judged.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The products of the batch that exist, with the version they were read at.
    pub stock: Vec<(ProductId, StockRow)>,
    /// The ids of the batch stored before it, by kind and id.
    pub stored: HashMap<(Kind, String), Stored>,
}
