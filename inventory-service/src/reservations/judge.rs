//! The judging of one batch of order events, in memory and in arrival order, against what
//! [`super::apply`] read: an order is reserved when the stock the earlier orders left covers
//! every item (all or nothing), else rejected (a large order refused does not stop a later
//! small one); a cancellation gives back what its order holds, once, or leaves a tombstone
//! when the order was never seen, so its creation later in the batch, or in a later one,
//! deducts nothing. Nothing is written here.

use std::collections::{HashMap, HashSet};

use platform::messaging::consumer::Handled;
use platform::messaging::outbox::NewOutboxRow;
use platform::telemetry::TraceContext;
use shared::events::{
    Envelope, InventoryEvent, LineItem, OrderCreated, RejectionReason, StockRejected,
    StockReleased, StockReserved,
};
use shared::ids::{OrderId, ProductId};
use shared::keys;
use uuid::Uuid;

use super::apply::{Event, Work};
use super::queries::{Reservation, ReservationState};
use crate::stock::queries::StockRow;

/// A reservation as the batch sees it so far.
pub(super) struct Known {
    pub(super) reservation: Reservation,
    /// Written by this batch (inserted at the end) rather than read.
    pub(super) new: bool,
    /// Read, then released by this batch.
    pub(super) released: bool,
}

impl Known {
    /// A reservation as read before the batch.
    pub(super) fn read(reservation: Reservation) -> Self {
        Self {
            reservation,
            new: false,
            released: false,
        }
    }
}

/// What the batch decided, for [`super::apply`] to write.
pub(super) struct Judged {
    /// One per work, in order.
    pub(super) handled: Vec<Handled>,
    /// What each product read is left with.
    pub(super) stock: HashMap<ProductId, i64>,
    /// Given back to products the batch did not read.
    pub(super) given_back_unread: Vec<LineItem>,
    /// Every reservation of the batch's orders, as the batch left it.
    pub(super) known: HashMap<OrderId, Known>,
    /// The message ids to record, with their kinds.
    pub(super) recorded: Vec<(Uuid, &'static str)>,
    pub(super) outbox: Vec<NewOutboxRow>,
}

/// Judges `works` in arrival order: `seen` holds the message ids recorded before, `known`
/// the orders' reservations and `read` the stock of the products to deduct.
pub(super) fn judge(
    works: &[Work],
    mut seen: HashSet<Uuid>,
    mut known: HashMap<OrderId, Known>,
    read: &HashMap<ProductId, StockRow>,
) -> sqlx::Result<Judged> {
    let mut stock: HashMap<ProductId, i64> =
        read.iter().map(|(id, row)| (*id, row.stock)).collect();
    let mut given_back_unread = Vec::new();
    let mut handled = Vec::with_capacity(works.len());
    let mut recorded = Vec::new();
    let mut outbox = Vec::new();
    for work in works {
        if !seen.insert(work.message_id) {
            handled.push(Handled::Duplicate);
            continue;
        }
        handled.push(Handled::Applied);
        recorded.push((work.message_id, work.event.kind()));
        let event = match &work.event {
            Event::Created(created) => match known.get(&created.order_id) {
                // Seen before (a re-published creation, or a tombstone): answer again.
                Some(existing) => answer_again(&existing.reservation),
                None => {
                    let (reservation, event) = reserve(created, &mut stock);
                    known.insert(reservation.order_id, new_known(reservation));
                    Some(event)
                }
            },
            Event::Cancelled(cancelled) => {
                let order_id = cancelled.order_id;
                match known.get_mut(&order_id) {
                    None => {
                        tracing::info!(%order_id, "cancellation before creation: leaving a tombstone");
                        known.insert(order_id, new_known(tombstone(order_id)));
                        None
                    }
                    Some(existing) if existing.reservation.state == ReservationState::Applied => {
                        for item in &existing.reservation.items {
                            match stock.get_mut(&item.product_id) {
                                Some(left) => *left += item.quantity,
                                None => given_back_unread.push(*item),
                            }
                        }
                        existing.reservation.state = ReservationState::Released;
                        existing.released |= !existing.new;
                        Some(InventoryEvent::Released(StockReleased {
                            order_id,
                            items: existing.reservation.items.clone(),
                        }))
                    }
                    // Rejected, released or tombstoned already: nothing was deducted or it is back.
                    Some(_) => None,
                }
            }
        };
        if let Some(event) = event {
            outbox.push(outbox_row(event, &work.trace)?);
        }
    }
    Ok(Judged {
        handled,
        stock,
        given_back_unread,
        known,
        recorded,
        outbox,
    })
}

fn new_known(reservation: Reservation) -> Known {
    Known {
        reservation,
        new: true,
        released: false,
    }
}

/// Judges `created` against `stock` as the earlier orders left it, deducting on success.
fn reserve(
    created: &OrderCreated,
    stock: &mut HashMap<ProductId, i64>,
) -> (Reservation, InventoryEvent) {
    let order_id = created.order_id;
    let mut sorted: Vec<LineItem> = created.items.clone();
    sorted.sort_by_key(|item| item.product_id);
    let shortfall = sorted
        .iter()
        .find_map(|item| match stock.get(&item.product_id) {
            None => Some(RejectionReason::UnknownProduct),
            Some(left) if *left < item.quantity => Some(RejectionReason::InsufficientStock),
            Some(_) => None,
        });
    let (state, reason, event) = match shortfall {
        None => {
            for item in &sorted {
                if let Some(left) = stock.get_mut(&item.product_id) {
                    *left -= item.quantity;
                }
            }
            let event = InventoryEvent::Reserved(StockReserved {
                order_id,
                items: created.items.clone(),
            });
            (ReservationState::Applied, None, event)
        }
        Some(reason) => {
            let event = InventoryEvent::Rejected(StockRejected { order_id, reason });
            (ReservationState::Rejected, Some(reason), event)
        }
    };
    let reservation = Reservation {
        order_id,
        state,
        items: created.items.clone(),
        rejection_reason: reason,
        updated_at: chrono::Utc::now(),
    };
    (reservation, event)
}

fn tombstone(order_id: OrderId) -> Reservation {
    Reservation {
        order_id,
        state: ReservationState::Cancelled,
        items: Vec::new(),
        rejection_reason: None,
        updated_at: chrono::Utc::now(),
    }
}

/// The verdict again for an order already handled, so order-service can settle even if the
/// first answer was lost (its guarded update makes the repeat harmless).
fn answer_again(existing: &Reservation) -> Option<InventoryEvent> {
    let order_id = existing.order_id;
    match (existing.state, existing.rejection_reason) {
        (ReservationState::Applied, _) => Some(InventoryEvent::Reserved(StockReserved {
            order_id,
            items: existing.items.clone(),
        })),
        (ReservationState::Rejected, Some(reason)) => {
            Some(InventoryEvent::Rejected(StockRejected { order_id, reason }))
        }
        _ => None,
    }
}

fn outbox_row(event: InventoryEvent, trace: &TraceContext) -> sqlx::Result<NewOutboxRow> {
    NewOutboxRow::new(keys::INVENTORY_EXCHANGE, &Envelope::new(event), trace)
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))
}
