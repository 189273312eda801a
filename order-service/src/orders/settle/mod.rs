//! Moving orders through the status machine on inventory's answers, whoever brings them:
//! inventory's events or reconciliation; and what every change shares ([`Transition`], the
//! release request). The customer's cancel is [`super::cancellation`], the payment window's
//! confirm and expiry [`super::payment`]. Every change and the event it causes commit in the
//! caller's transaction.

use chrono::Utc;
use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use platform::telemetry::TraceContext;
use shared::events::RejectionReason;
use shared::ids::OrderId;

mod batch;
pub mod consumer;
mod queries;

use crate::metrics::{ORDER_END_TO_END_SECONDS, ORDER_TRANSITIONS_TOTAL};
use crate::orders::OrderStatus;
use crate::orders::payment::PaymentWindow;
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
    /// Seconds from creation, when the order reached its first terminal status.
    end_to_end: Option<f64>,
}

pub use batch::{Effect, Incoming, MessageKey, SettleError, Settled, settle_all};

impl Transition {
    /// The change `from` → `to` of `row`'s order (`to` is what the caller just wrote).
    pub(crate) fn from_row(row: &OrderRow, from: OrderStatus, to: OrderStatus) -> Self {
        Self::of(to, (!from.is_terminal()).then_some(row.created_at))
    }

    /// An order that left `PENDING` for `to`, created at `created_at`.
    fn left_pending(to: OrderStatus, created_at: chrono::DateTime<Utc>) -> Self {
        Self::of(to, Some(created_at))
    }

    /// An order entering `to`, timed from `created_at` if it had not ended before: an order
    /// ends at its first terminal status (`AWAITING_PAYMENT` is none, see
    /// [`OrderStatus::is_terminal`]).
    fn of(to: OrderStatus, created_at: Option<chrono::DateTime<Utc>>) -> Self {
        let end_to_end = created_at
            .filter(|_| to.is_terminal())
            .map(|created_at| (Utc::now() - created_at).as_seconds_f64().max(0.0));
        Self { to, end_to_end }
    }

    pub fn record(self) {
        metrics::counter!(ORDER_TRANSITIONS_TOTAL, "to" => self.to.as_str()).increment(1);
        if let Some(seconds) = self.end_to_end {
            metrics::histogram!(ORDER_END_TO_END_SECONDS).record(seconds);
        }
    }
}

/// What `verdict` makes of a `PENDING` order while `window` is in force.
fn target(verdict: Verdict, window: PaymentWindow) -> (OrderStatus, Option<RejectionReason>) {
    match verdict {
        Verdict::Reserved => (window.reserved(), None),
        Verdict::Rejected(reason) => (OrderStatus::Rejected, Some(reason)),
    }
}

/// Writes an `order.cancelled` ([`batch::release_request`]) for each order to the outbox in
/// the caller's transaction, in one statement: the one way an order's stock is asked back,
/// whether it was cancelled, expired, or its release is sent again. Returns the rows, for the
/// relay once the caller committed.
pub(crate) async fn request_releases(
    conn: Conn<'_>,
    orders: impl IntoIterator<Item = (OrderId, TraceContext)>,
) -> sqlx::Result<Vec<NewOutboxRow>> {
    let rows = orders
        .into_iter()
        .map(|(order_id, trace)| batch::release_request(order_id, &trace))
        .collect::<sqlx::Result<Vec<_>>>()?;
    platform::messaging::outbox::enqueue_all(conn, &rows).await?;
    Ok(rows)
}
