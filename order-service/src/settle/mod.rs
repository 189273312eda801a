//! Moving orders through the status machine, whoever asks: inventory's events, the
//! customer's cancel, or reconciliation. Every change and the event it causes commit in
//! the caller's transaction.

use chrono::Utc;
use platform::http::TraceContext;
use shared::events::{Envelope, OrderCancelled, OrderEvent, RejectionReason};
use shared::ids::{OrderId, UserId};
use shared::keys;
use sqlx::PgConnection;

mod batch;

use crate::db;
use crate::db::orders::OrderRow;
use crate::domain::OrderStatus;
use crate::metrics::{ORDER_END_TO_END_SECONDS, ORDER_TRANSITIONS_TOTAL};

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

pub use batch::{Effect, Incoming, SettleError, Settled, settle_all};

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

/// Applies inventory's verdict to a `PENDING` order. A verdict for an order that already
/// left `PENDING` changes nothing — except that stock reserved for a cancelled order is
/// asked back with another `order.cancelled` (inventory releases at most once).
pub async fn apply_verdict(
    conn: &mut PgConnection,
    order_id: OrderId,
    verdict: Verdict,
    trace: &TraceContext,
) -> sqlx::Result<Option<Transition>> {
    let (to, reason) = target(verdict);
    if let Some(row) = db::orders::settle_pending(conn, order_id, to, reason).await? {
        return Ok(Some(Transition::from_row(&row, OrderStatus::Pending, to)));
    }
    let current = db::orders::find(conn, order_id).await?;
    match current {
        Some(row)
            if verdict == Verdict::Reserved && row.status == OrderStatus::Cancelled.as_str() =>
        {
            tracing::info!(%order_id, "stock reserved for a cancelled order; asking for its release");
            request_release(conn, order_id, trace).await?;
        }
        Some(row) => tracing::debug!(%order_id, status = row.status, "late verdict ignored"),
        None => tracing::warn!(%order_id, "verdict for an unknown order ignored"),
    }
    Ok(None)
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
    let Some(row) = db::orders::find_for_update(conn, order_id).await? else {
        return Ok(Cancelled::NotFound);
    };
    // Another user's order is not there for this caller (its existence is not revealed).
    if owner.is_some_and(|owner| owner.0 != row.user_id) {
        return Ok(Cancelled::NotFound);
    }
    // Strict: a status the CHECK constraint should never have admitted fails loudly.
    let from = OrderStatus::parse(&row.status).ok_or_else(|| {
        sqlx::Error::Decode(format!("unknown order status {:?}", row.status).into())
    })?;
    if from == OrderStatus::Cancelled {
        return Ok(Cancelled::Already(row));
    }
    if !from.can_become(OrderStatus::Cancelled) {
        return Ok(Cancelled::Rejected);
    }
    let row = db::orders::set_status(conn, order_id, OrderStatus::Cancelled).await?;
    request_release(conn, order_id, trace).await?;
    let transition = Transition::from_row(&row, from, OrderStatus::Cancelled);
    Ok(Cancelled::Now(row, transition))
}

/// Writes an `order.cancelled` (a new event each time) to the outbox in the caller's
/// transaction: inventory gives back what it deducted for the order at most once, however
/// many copies arrive.
pub(crate) async fn request_release(
    conn: &mut PgConnection,
    order_id: OrderId,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let event = Envelope::new(OrderEvent::Cancelled(OrderCancelled { order_id }));
    platform::outbox::enqueue(conn, keys::ORDERS_EXCHANGE, &event, trace).await
}
