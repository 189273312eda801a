//! The customer's cancel, the saga's compensation: a `PENDING`, `AWAITING_PAYMENT` or
//! `CONFIRMED` order becomes `CANCELLED` (or `EXPIRED`, when its payment window had closed)
//! and asks inventory for its stock back, in the caller's transaction.

use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use platform::telemetry::TraceContext;
use shared::ids::{OrderId, UserId};

use crate::orders::OrderStatus;
use crate::orders::payment::expiry;
use crate::orders::queries::OrderRow;
use crate::orders::settle::{Transition, request_releases};

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
