//! Moving orders through the status machine, whoever asks: inventory's events, the
//! customer's cancel, or reconciliation. Every change and the event it causes commit in
//! the caller's transaction.

use chrono::Utc;
use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use platform::telemetry::TraceContext;
use shared::events::RejectionReason;
use shared::ids::{OrderId, UserId};

mod batch;
pub mod consumer;
mod queries;

use crate::metrics::{ORDER_END_TO_END_SECONDS, ORDER_TRANSITIONS_TOTAL};
use crate::orders::OrderStatus;
use crate::orders::payment::{PaymentWindow, expiry};
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

/// What a cancel request found and did.
#[derive(Debug)]
pub enum Cancelled {
    /// Its stock is being given back: cancelled now, or expired now when its payment window
    /// had closed (docs/contract.md §3.1.1); with the release request written, for the relay
    /// once committed.
    Now(OrderRow, Transition, Vec<NewOutboxRow>),
    /// Cancelled or expired before: returned as it is.
    Already(OrderRow),
    Rejected,
    NotFound,
}

/// Cancels a `PENDING`, `AWAITING_PAYMENT` or `CONFIRMED` order and emits `order.cancelled`
/// (the saga's compensation); an order waiting for its payment at or after its due time
/// expires instead. A cancelled or expired order is returned unchanged. With an `owner`, only
/// an order of theirs is found.
pub async fn cancel(
    mut conn: Conn<'_>,
    order_id: OrderId,
    owner: Option<UserId>,
    trace: &TraceContext,
) -> sqlx::Result<Cancelled> {
    let Some(row) =
        crate::orders::queries::find_owned_for_update(conn.reborrow(), order_id, owner).await?
    else {
        return Ok(Cancelled::NotFound);
    };
    let from = row.status;
    if from.gave_back() {
        return Ok(Cancelled::Already(row));
    }
    if from == OrderStatus::AwaitingPayment {
        // The window closed first: the clock decided, whether or not the expiry ran yet.
        let mut expired = expiry::expire(conn.reborrow(), Some((order_id, trace)), 1).await?;
        if let Some((row, transition)) = expired.orders.pop() {
            return Ok(Cancelled::Now(row, transition, expired.events));
        }
    }
    if !from.can_become(OrderStatus::Cancelled) {
        return Ok(Cancelled::Rejected);
    }
    let row = crate::orders::queries::set_status(conn.reborrow(), order_id, OrderStatus::Cancelled)
        .await?;
    let events = request_releases(conn, [(order_id, trace.clone())]).await?;
    let transition = Transition::from_row(&row, from, OrderStatus::Cancelled);
    Ok(Cancelled::Now(row, transition, events))
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
