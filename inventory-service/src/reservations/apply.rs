//! One batch of order events applied in one transaction, with the outcome each would have
//! had alone, in arrival order.
//!
//! - The batch's orders are serialised against every other handler (one advisory lock per
//!   order, taken in one statement), then the message ids seen before, the orders'
//!   reservations and the stock of the products to deduct are read, one statement each.
//! - Each event is judged in memory against what the earlier ones left ([`super::judge`],
//!   by the rules of [`crate::stock::engine`]).
//! - Then the stock changes (the conditional update: version as read; give-backs to products
//!   the batch did not read need no version), reservations, message ids and outbox rows are
//!   written with one multi-row statement each. A row that moved
//!   since it was read fails the batch as contention; the caller rolls back and tries again.

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

/// Applies `works` inside the caller's transaction; one [`Handled`] per work. The caller
/// checks its locks and commits.
pub async fn apply(conn: &mut PgConnection, works: &[Work]) -> Result<Vec<Handled>, BatchError> {
    let order_ids: Vec<Uuid> = works.iter().map(|w| w.event.order_id().0).collect();
    queries::lock_orders(conn, &order_ids).await?;
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
    let stock = Ledger::new(stock_queries::read_all(conn, &products_of(works)).await?);
    let judged = judge::judge(works, seen, known, stock)?;
    write(conn, judged).await
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
    queries::insert_all(conn, &inserted).await?;
    let released: Vec<Uuid> = released.iter().map(|k| k.reservation.order_id.0).collect();
    queries::set_state_all(conn, &released, ReservationState::Released).await?;
    if platform::messaging::processed::record_all(conn, &recorded).await? != recorded.len() as u64 {
        return Err(BatchError::Contended(
            "a message was recorded by another consumer",
        ));
    }
    platform::messaging::outbox::enqueue_all(conn, outbox).await?;
    Ok(handled)
}
