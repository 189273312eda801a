//! The judging of one batch of order events, in memory and in arrival order, against what
//! [`super::apply`] read: an order is reserved when the stock engine ([`crate::stock::engine`])
//! lets it take every item, else rejected with the engine's reason; a cancellation gives back
//! what its order holds, once, or leaves a tombstone when the order was never seen, so its
//! creation later in the batch, or in a later one, deducts nothing. Nothing is written here.

use std::collections::{HashMap, HashSet};

use platform::messaging::consumer::Handled;
use platform::messaging::outbox::NewOutboxRow;
use platform::telemetry::TraceContext;
use shared::events::{
    Envelope, InventoryEvent, OrderCreated, StockRejected, StockReleased, StockReserved,
};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

use super::queries::{Reservation, ReservationState};
use super::work::{Event, Work};
use crate::stock::engine::Ledger;

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
    /// The stock as the batch left it.
    pub(super) stock: Ledger,
    /// Every reservation of the batch's orders, as the batch left it.
    pub(super) known: HashMap<OrderId, Known>,
    /// The message ids to record, with their kinds.
    pub(super) recorded: Vec<(Uuid, &'static str)>,
    pub(super) outbox: Vec<NewOutboxRow>,
}

/// Judges `works` in arrival order: `seen` holds the message ids recorded before, `known`
/// the orders' reservations and `stock` the products to deduct, as read.
pub(super) fn judge(
    works: &[Work],
    mut seen: HashSet<Uuid>,
    mut known: HashMap<OrderId, Known>,
    mut stock: Ledger,
) -> sqlx::Result<Judged> {
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
                        stock.give_back(&existing.reservation.items);
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
fn reserve(created: &OrderCreated, stock: &mut Ledger) -> (Reservation, InventoryEvent) {
    let order_id = created.order_id;
    let (state, reason, event) = match stock.take(&created.items) {
        Ok(()) => {
            let event = InventoryEvent::Reserved(StockReserved {
                order_id,
                items: created.items.clone(),
            });
            (ReservationState::Applied, None, event)
        }
        Err(refusal) => {
            let reason = refusal.reason;
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
