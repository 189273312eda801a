//! `POST /deductions`: applied in batches by group commit, one transaction and one commit
//! for every request that queued for the same products while the previous batch ran.
//!
//! - [`queue`]: who leads, what joins the next batch, [`MAX_BATCH`].
//! - [`batch`]: one batch under its locks, retried when it loses a race; [`attempt`]: one
//!   try of it, in two round trips: read the stock and the stored ids, judge every request in
//!   arrival order ([`judge`], by the stock engine's rules), write everything in one statement
//!   that commits it.
//! - [`response`]: the first answer of an id (stored) and its replays.
//! - [`retry`]: which failures are lost races, retried before answering 503 `busy`.
//! - [`request`]: what a valid deduction is; [`queries`]: its table and the two statements;
//!   [`routes`]: the handler.
//!
//! A batch of one runs the same code as a batch of a hundred: there is no other write path.

pub mod attempt;
mod batch;
mod error;
mod judge;
pub mod queries;
mod queue;
pub mod request;
mod response;
mod retry;
pub mod routes;
pub mod verdict;
mod waiting;

use serde::Serialize;
use shared::events::LineItem;
use utoipa::ToSchema;

pub use error::DeductionError;
pub use queue::{BatchStats, Deductions, MAX_BATCH};
pub use retry::{AttemptError, Retry};

/// The body of an applied deduction.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "deduction_id": "flash-2026-11-29-0001", "status": "APPLIED",
    "items": [{"product_id": 1001, "quantity": 1}]
}))]
pub struct DeductionApplied {
    pub deduction_id: String,
    pub status: AppliedStatus,
    /// The items deducted, in ascending product id.
    pub items: Vec<LineItem>,
}

/// Always `APPLIED`: a refused deduction answers a problem instead.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AppliedStatus {
    Applied,
}
