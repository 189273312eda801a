//! One batch of order events applied in one transaction, with the outcome each would have
//! had alone, in arrival order.
//!
//! - The message ids seen before and the orders' reservations are read, then the stock of
//!   every product the batch may change is locked and read in one statement that waits for
//!   no row lock ([`stock_queries::lock_all`]): an event needing a product another
//!   transaction holds waits for a later batch, with every later event of its order.
//! - Each other event is judged in memory against what the earlier ones left
//!   ([`super::judge`], by the rules of [`crate::stock::engine`]).
//! - Then the stock changes, reservations, message ids and outbox rows are written with one
//!   multi-row statement each. A creation and a cancellation of one order in two batches at
//!   once are not serialised up front: both write the order's one reservation row (its
//!   primary key, or a release guarded by its state), so whichever comes second finds a row
//!   missing from its count, rolls back as contention and is judged again on what the first
//!   left (decision 0055).

use std::collections::{HashMap, HashSet};

use platform::messaging::consumer::Handled;
use platform::telemetry::TraceContext;
use shared::events::{OrderCancelled, OrderCreated};
use shared::ids::{OrderId, ProductId};
use shared::keys;
use sqlx::PgConnection;
use uuid::Uuid;

use super::judge::{self, Judged, Known};
use super::queries::{self, NewReservation, ReservationState};
use crate::stock::engine::Ledger;
use crate::stock::queries as stock_queries;

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

    pub(super) fn kind(&self) -> &'static str {
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

/// Applies `works` inside the caller's transaction, in arrival order; one outcome per work:
/// `None` for a work that waits for a later batch because a product row it needs is held by
/// another transaction (and so does every later event of its order, to keep their order).
/// The caller checks its locks and commits.
pub async fn apply(
    conn: &mut PgConnection,
    works: &[Work],
) -> Result<Vec<Option<Handled>>, BatchError> {
    let order_ids: Vec<Uuid> = works.iter().map(|w| w.event.order_id().0).collect();
    let ids: Vec<Uuid> = works.iter().map(|w| w.message_id).collect();
    let seen: HashSet<Uuid> = platform::messaging::processed::recorded_among(conn, &ids)
        .await?
        .into_iter()
        .collect();
    let known: HashMap<OrderId, Known> = queries::find_all(conn, &order_ids)
        .await?
        .into_iter()
        .map(|reservation| (reservation.order_id, Known::read(reservation)))
        .collect();
    let locked = stock_queries::lock_all(conn, &products_touched(works, &known)).await?;
    let ready = ready(works, &known, &locked.busy);
    let judged_works: Vec<Work> = works
        .iter()
        .zip(&ready)
        .filter(|(_, ready)| **ready)
        .map(|(work, _)| work.clone())
        .collect();
    let judged = judge::judge(&judged_works, seen, known, Ledger::new(locked.rows))?;
    let mut handled = write(conn, judged).await?.into_iter();
    Ok(ready
        .into_iter()
        .map(|ready| if ready { handled.next() } else { None })
        .collect())
}

/// Every product the batch may change: those its creations name, and those its
/// cancellations give back to (the items of reservations still applied).
fn products_touched(works: &[Work], known: &HashMap<OrderId, Known>) -> Vec<ProductId> {
    let mut products = products_of(works);
    for work in works {
        if let Event::Cancelled(cancelled) = &work.event
            && let Some(existing) = known.get(&cancelled.order_id)
            && existing.reservation.state == ReservationState::Applied
        {
            products.extend(existing.reservation.items.iter().map(|i| i.product_id));
        }
    }
    products
}

/// Whether each work can go on now: not when a product it needs is `busy` (a creation's
/// items; a cancellation's when `known` says its order still holds them), nor when an
/// earlier event of its order waits.
pub(super) fn ready(
    works: &[Work],
    known: &HashMap<OrderId, Known>,
    busy: &HashSet<ProductId>,
) -> Vec<bool> {
    let needs_busy = |items: &[shared::events::LineItem]| {
        items.iter().any(|item| busy.contains(&item.product_id))
    };
    let mut waiting: HashSet<OrderId> = HashSet::new();
    works
        .iter()
        .map(|work| {
            let order_id = work.event.order_id();
            let blocked = match &work.event {
                Event::Created(created) => needs_busy(&created.items),
                Event::Cancelled(_) => known.get(&order_id).is_some_and(|k| {
                    k.reservation.state == ReservationState::Applied
                        && needs_busy(&k.reservation.items)
                }),
            };
            if blocked || waiting.contains(&order_id) {
                waiting.insert(order_id);
                false
            } else {
                true
            }
        })
        .collect()
}

/// Every product the creations of `works` name, in arrival order (repeats kept).
pub(super) fn products_of(works: &[Work]) -> Vec<ProductId> {
    works
        .iter()
        .filter_map(|w| match &w.event {
            Event::Created(created) => Some(created.items.iter().map(|i| i.product_id)),
            Event::Cancelled(_) => None,
        })
        .flatten()
        .collect()
}

/// Writes what the batch decided, one statement per table.
async fn write(conn: &mut PgConnection, judged: Judged) -> Result<Vec<Handled>, BatchError> {
    let Judged {
        handled,
        stock,
        known,
        recorded,
        outbox,
    } = judged;
    if !stock_queries::apply_changes(conn, &stock.changes()).await? {
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
    // Another batch may have written a reservation of one of these orders since they were
    // read (a creation and a cancellation of one order, in two channels): then a row is
    // missing from a count, and the batch is judged again on what that one left.
    if queries::insert_all(conn, &inserted).await? != inserted.len() as u64 {
        return Err(BatchError::Contended(
            "another batch wrote a reservation of this order meanwhile",
        ));
    }
    let released: Vec<Uuid> = released.iter().map(|k| k.reservation.order_id.0).collect();
    if queries::release_all(conn, &released).await? != released.len() as u64 {
        return Err(BatchError::Contended(
            "another batch released this order's stock meanwhile",
        ));
    }
    if platform::messaging::processed::record_all(conn, &recorded).await? != recorded.len() as u64 {
        return Err(BatchError::Contended(
            "a message was recorded by another consumer",
        ));
    }
    platform::messaging::outbox::enqueue_all(conn, outbox).await?;
    Ok(handled)
}
