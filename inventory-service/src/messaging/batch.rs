//! One batch of order events applied in one transaction, with the outcome each would have
//! had alone, in arrival order.
//!
//! - The batch's orders are serialised against every other handler (one advisory lock per
//!   order, taken in one statement), then the message ids seen before, the orders'
//!   reservations and the stock of the products to deduct are read, one statement each.
//! - Each event is judged in memory against what the earlier ones left: an order is reserved
//!   when the stock the earlier orders left covers every item (all or nothing), else
//!   rejected (a large order refused does not stop a later small one); a cancellation gives
//!   back what its order holds, once, or leaves a tombstone when the order was never seen,
//!   so its creation later in the batch, or in a later one, deducts nothing.
//! - Then the stock changes (the conditional update: version as read; give-backs to products
//!   the batch did not read need no version), reservations, message ids and outbox rows are
//!   written with one multi-row statement each. A row that moved
//!   since it was read fails the batch as contention; the caller rolls back and tries again.

use std::collections::{HashMap, HashSet};

use platform::consumer::Handled;
use platform::http::TraceContext;
use platform::outbox::NewOutboxRow;
use shared::events::{
    Envelope, InventoryEvent, LineItem, OrderCancelled, OrderCreated, RejectionReason,
    StockRejected, StockReleased, StockReserved,
};
use shared::ids::{OrderId, ProductId};
use shared::keys;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db;
use crate::db::reservations::{NewReservation, Reservation, ReservationState};
use crate::db::stock::{Change, StockRow};

/// An order event of the batch.
#[derive(Debug, Clone)]
pub enum Event {
    Created(OrderCreated),
    Cancelled(OrderCancelled),
}

impl Event {
    pub fn order_id(&self) -> OrderId {
        match self {
            Self::Created(e) => e.order_id,
            Self::Cancelled(e) => e.order_id,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Created(_) => keys::ORDER_CREATED,
            Self::Cancelled(_) => keys::ORDER_CANCELLED,
        }
    }
}

/// One message of the batch, parsed.
#[derive(Debug, Clone)]
pub struct Work {
    pub message_id: Uuid,
    pub event: Event,
    pub trace: TraceContext,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A stock row moved since it was read, or another consumer recorded a message id
    /// meanwhile: nothing is wrong with the messages; roll back and try again.
    #[error("contention: {0}")]
    Contended(&'static str),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A reservation as the batch sees it so far.
struct Known {
    reservation: Reservation,
    /// Written by this batch (inserted at the end) rather than read.
    new: bool,
    /// Read, then released by this batch.
    released: bool,
}

/// Applies `works` inside the caller's transaction; one [`Handled`] per work. The caller
/// checks its locks and commits.
pub async fn apply(conn: &mut PgConnection, works: &[Work]) -> Result<Vec<Handled>, BatchError> {
    let order_ids: Vec<Uuid> = works.iter().map(|w| w.event.order_id().0).collect();
    db::reservations::lock_orders(conn, &order_ids).await?;
    let ids: Vec<Uuid> = works.iter().map(|w| w.message_id).collect();
    let mut seen: HashSet<Uuid> = platform::batch_writes::recorded_among(conn, &ids)
        .await?
        .into_iter()
        .collect();
    let mut known: HashMap<OrderId, Known> = db::reservations::find_all(conn, &order_ids)
        .await?
        .into_iter()
        .map(|reservation| {
            let known = Known {
                reservation,
                new: false,
                released: false,
            };
            (known.reservation.order_id, known)
        })
        .collect();
    let wanted: Vec<ProductId> = works
        .iter()
        .filter_map(|w| match &w.event {
            Event::Created(created) => Some(created.items.iter().map(|i| i.product_id)),
            Event::Cancelled(_) => None,
        })
        .flatten()
        .collect();
    let read: HashMap<ProductId, StockRow> = db::stock::read_all(conn, &wanted)
        .await?
        .into_iter()
        .collect();
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

    let mut changes: Vec<Change> = read
        .iter()
        .filter_map(|(id, row)| {
            let delta = stock[id] - row.stock;
            (delta != 0).then_some(Change {
                product_id: *id,
                delta,
                version: Some(row.version),
            })
        })
        .collect();
    // One row per product: an UPDATE joins each row once.
    let mut given_back: HashMap<ProductId, i64> = HashMap::new();
    for item in given_back_unread {
        *given_back.entry(item.product_id).or_default() += item.quantity;
    }
    changes.extend(given_back.into_iter().map(|(product_id, delta)| Change {
        product_id,
        delta,
        version: None,
    }));
    if !db::stock::apply_changes(conn, &changes).await? {
        return Err(BatchError::Contended(
            "a product's stock moved since it was read",
        ));
    }
    let (inserted, released): (Vec<&Known>, Vec<&Known>) = known
        .values()
        .filter(|k| k.new || k.released)
        .partition(|k| k.new);
    let inserted: Vec<NewReservation> = inserted
        .into_iter()
        .map(|k| NewReservation {
            order_id: k.reservation.order_id,
            state: k.reservation.state,
            items: k.reservation.items.clone(),
            rejection_reason: k.reservation.rejection_reason,
        })
        .collect();
    db::reservations::insert_all(conn, &inserted).await?;
    let released: Vec<Uuid> = released.iter().map(|k| k.reservation.order_id.0).collect();
    db::reservations::set_state_all(conn, &released, ReservationState::Released).await?;
    if platform::batch_writes::record_all(conn, &recorded).await? != recorded.len() as u64 {
        return Err(BatchError::Contended(
            "a message was recorded by another consumer",
        ));
    }
    platform::batch_writes::enqueue_all(conn, outbox).await?;
    Ok(handled)
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
