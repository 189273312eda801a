//! Moving orders through the status machine, whoever asks: inventory's events, the
//! customer's cancel, or reconciliation. Every change and the event it causes commit in
//! the caller's transaction.

use chrono::Utc;
use platform::telemetry::TraceContext;
use shared::events::RejectionReason;
use shared::ids::{OrderId, UserId};
use sqlx::PgConnection;

mod batch;
pub mod consumer;

use crate::metrics::{ORDER_END_TO_END_SECONDS, ORDER_TRANSITIONS_TOTAL};
use crate::orders::OrderStatus;
use crate::orders::queries::OrderRow;

/// Inventory's answer about an order's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Reserved,
    Rejected(RejectionReason),
}

/// A status change that happened, to be counted once its transaction committed.
#[derive(Debug, Clone)]
#[must_use = "record the transition after the commit"]
pub struct Transition {
    to: OrderStatus,
    /// Seconds from creation, when the order left `PENDING`.
    end_to_end: Option<f64>,
}

pub use batch::{Effect, Incoming, MessageKey, SettleError, Settled, settle_all};

impl Transition {
    /// The change `from` → `to` of `row`'s order (`to` is what the caller just wrote).
    fn from_row(row: &OrderRow, from: OrderStatus, to: OrderStatus) -> Self {
        let end_to_end = (from == OrderStatus::Pending)
            .then(|| (Utc::now() - row.created_at).as_seconds_f64().max(0.0));
        Self { to, end_to_end }
    }

    /// An order that left `PENDING` for `to`, created at `created_at`.
    fn left_pending(to: OrderStatus, created_at: chrono::DateTime<Utc>) -> Self {
        let end_to_end = Some((Utc::now() - created_at).as_seconds_f64().max(0.0));
        Self { to, end_to_end }
    }

    pub fn record(self) {
        metrics::counter!(ORDER_TRANSITIONS_TOTAL, "to" => self.to.as_str()).increment(1);
        if let Some(seconds) = self.end_to_end {
            metrics::histogram!(ORDER_END_TO_END_SECONDS).record(seconds);
        }
    }
}

fn target(verdict: Verdict) -> (OrderStatus, Option<RejectionReason>) {
    match verdict {
        Verdict::Reserved => (OrderStatus::Confirmed, None),
        Verdict::Rejected(reason) => (OrderStatus::Rejected, Some(reason)),
    }
}

/// What a cancel request found and did.
#[derive(Debug)]
pub enum Cancelled {
    Now(OrderRow, Transition),
    Already(OrderRow),
    Rejected,
    NotFound,
}

/// Cancels a `PENDING` or `CONFIRMED` order and emits `order.cancelled` (the saga's
/// compensation); cancelling a cancelled order changes nothing. With an `owner`, only an
/// order of theirs is found.
pub async fn cancel(
    conn: &mut PgConnection,
    order_id: OrderId,
    owner: Option<UserId>,
    trace: &TraceContext,
) -> sqlx::Result<Cancelled> {
    let Some(row) = crate::orders::queries::find_for_update(conn, order_id).await? else {
        return Ok(Cancelled::NotFound);
    };
    // Another user's order is not there for this caller (its existence is not revealed).
    if owner.is_some_and(|owner| owner.0 != row.user_id) {
        return Ok(Cancelled::NotFound);
    }
    let from = row.status;
    if from == OrderStatus::Cancelled {
        return Ok(Cancelled::Already(row));
    }
    if !from.can_become(OrderStatus::Cancelled) {
        return Ok(Cancelled::Rejected);
    }
    let row = crate::orders::queries::set_status(conn, order_id, OrderStatus::Cancelled).await?;
    request_release(conn, order_id, trace).await?;
    let transition = Transition::from_row(&row, from, OrderStatus::Cancelled);
    Ok(Cancelled::Now(row, transition))
}

/// Writes an `order.cancelled` ([`batch::release_request`]) to the outbox in the caller's
/// transaction.
pub(crate) async fn request_release(
    conn: &mut PgConnection,
    order_id: OrderId,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let row = batch::release_request(order_id, trace)?;
    platform::messaging::outbox::enqueue_all(conn, vec![row]).await
}
