//! Confirming an order once its payment is captured (`POST /orders/{order_id}/confirm`). The
//! order is locked first, so a confirm meets a cancel, another confirm or the expiry (which
//! skips locked rows) one after the other; then the guarded update decides by the database's
//! clock: before `payment_due_at` the order is `CONFIRMED`, at or after it the window is
//! closed, whether or not the expiry has run yet.

use chrono::{DateTime, Utc};
use platform::storage::Conn;
use shared::ids::{OrderId, UserId};

use crate::orders::OrderStatus;
use crate::orders::queries::OrderRow;
use crate::orders::settle::Transition;

/// What a confirm did.
#[derive(Debug)]
pub enum Confirmed {
    /// Confirmed by this request; count the transition once committed.
    Now(OrderRow, Transition),
    /// Confirmed before (by an earlier confirm, or at once with the window off).
    Already(OrderRow),
}

/// Why an order was not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmRefused {
    /// Unknown, or (with identity on) another user's: its existence is not revealed.
    #[error("order {0} not found")]
    NotFound(OrderId),
    /// Inventory has not reserved the stock yet; a retry in a moment may find it waiting.
    #[error(
        "order {0} is PENDING: its stock is not reserved yet; confirm it once it is AWAITING_PAYMENT"
    )]
    NotYetReserved(OrderId),
    #[error("order {order_id} is {}, not awaiting payment", status.as_str())]
    NotAwaiting {
        order_id: OrderId,
        status: OrderStatus,
    },
    #[error("the payment window of order {order_id} closed at {}", closed_at.map_or_else(|| "its due time".to_owned(), |at| at.to_rfc3339()))]
    WindowClosed {
        order_id: OrderId,
        closed_at: Option<DateTime<Utc>>,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Confirms `order_id` in the caller's transaction (the caller commits, then records the
/// transition). With an `owner`, only an order of theirs is found.
pub async fn confirm(
    mut conn: Conn<'_>,
    order_id: OrderId,
    owner: Option<UserId>,
) -> Result<Confirmed, ConfirmRefused> {
    let row = crate::orders::queries::find_owned_for_update(conn.reborrow(), order_id, owner)
        .await?
        .ok_or(ConfirmRefused::NotFound(order_id))?;
    match row.status {
        OrderStatus::AwaitingPayment => match super::queries::confirm_open(conn, order_id).await? {
            Some(confirmed) => {
                let transition = Transition::from_row(
                    &confirmed,
                    OrderStatus::AwaitingPayment,
                    OrderStatus::Confirmed,
                );
                Ok(Confirmed::Now(confirmed, transition))
            }
            None => Err(ConfirmRefused::WindowClosed {
                order_id,
                closed_at: row.payment_due_at,
            }),
        },
        OrderStatus::Confirmed => Ok(Confirmed::Already(row)),
        OrderStatus::Pending => Err(ConfirmRefused::NotYetReserved(order_id)),
        status => Err(ConfirmRefused::NotAwaiting { order_id, status }),
    }
}
