//! One batch of order events applied with one read and one write, each an autocommit
//! statement, with the outcome each event would have had alone, in arrival order.
//!
//! - The message ids seen before, the orders' reservations and the stock of every product the
//!   batch may change are read in one statement that waits for no row lock
//!   ([`queries::read_batch`]): an event needing a product another transaction holds waits
//!   for a later batch, with every later event of its order.
//! - Each other event is judged in memory against what the earlier ones left
//!   ([`super::judge`], by the rules of [`crate::stock::engine`]).
//! - Then the stock changes, reservations, message ids and outbox rows are written in one
//!   statement ([`queries::write_batch`]) that checks what the judgement relied on: the
//!   versions of the products read, and counts of what it wrote. A creation and a
//!   cancellation of one order in two batches at once are not serialised up front: both write
//!   the order's one reservation row (its primary key, or a release guarded by its state), so
//!   whichever comes second finds a row missing from its count, undoes itself as contention
//!   and is judged again on what the first left (decision 0055).

use std::collections::{HashMap, HashSet};

use platform::messaging::consumer::Handled;
use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use shared::ids::{OrderId, ProductId};
use uuid::Uuid;

use super::judge::{self, Judged, Known};
use super::queries::{self, BatchWrite, NewReservation, ReservationState};
use super::work::{Event, Work};
use crate::stock::engine::Ledger;
use crate::stock::queries::StockRow;

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A stock row moved since it was read, or another consumer recorded a message id
    /// meanwhile: nothing is wrong with the messages; roll back and try again.
    #[error("contention: {0}")]
    Contended(&'static str),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A batch read and judged, ready to write.
pub struct Judgement {
    /// Per work: whether it was judged (not waiting for a held product row).
    ready: Vec<bool>,
    handled: Vec<Handled>,
    judged: Vec<(ProductId, StockRow)>,
    judgement: Judged,
}

/// Reads what `works` need in one statement and judges them in arrival order; nothing is
/// written yet ([`Judgement::write`]). A work whose product row another transaction holds
/// waits for a later batch, with every later event of its order.
pub async fn read_and_judge(conn: Conn<'_>, works: &[Work]) -> Result<Judgement, BatchError> {
    let order_ids: Vec<Uuid> = works.iter().map(|w| w.event.order_id().0).collect();
    let ids: Vec<Uuid> = works.iter().map(|w| w.message_id).collect();
    let cancelled: Vec<Uuid> = works
        .iter()
        .filter(|w| matches!(w.event, Event::Cancelled(_)))
        .map(|w| w.event.order_id().0)
        .collect();
    let read = queries::read_batch(conn, &ids, &order_ids, &products_of(works), &cancelled).await?;
    let seen: HashSet<Uuid> = read.seen.into_iter().collect();
    let known: HashMap<OrderId, Known> = read
        .reservations
        .into_iter()
        .map(|reservation| (reservation.order_id, Known::read(reservation)))
        .collect();
    let ready = ready(works, &known, &read.stock.busy);
    let judged_works: Vec<Work> = works
        .iter()
        .zip(&ready)
        .filter(|(_, ready)| **ready)
        .map(|(work, _)| work.clone())
        .collect();
    let judged = read.stock.rows.clone();
    let mut judgement = judge::judge(&judged_works, seen, known, Ledger::new(read.stock.rows))?;
    let handled = std::mem::take(&mut judgement.handled);
    Ok(Judgement {
        ready,
        handled,
        judged,
        judgement,
    })
}

impl Judgement {
    /// Writes what the batch decided in one statement that commits on its own; one outcome
    /// per work (`None` for one that waits), and the outbox rows to hand to the relay.
    pub async fn write(
        self,
        conn: Conn<'_>,
    ) -> Result<(Vec<Option<Handled>>, Vec<NewOutboxRow>), BatchError> {
        let Judged {
            stock,
            known,
            recorded,
            outbox,
            ..
        } = self.judgement;
        let (inserted, released): (Vec<&Known>, Vec<&Known>) = known
            .values()
            .filter(|k| k.new || k.released)
            .partition(|k| k.new);
        let write = BatchWrite {
            judged: self.judged,
            changes: stock.changes(),
            inserted: inserted
                .into_iter()
                .map(|k| NewReservation {
                    order_id: k.reservation.order_id,
                    state: k.reservation.state,
                    items: k.reservation.items.clone(),
                    rejection_reason: k.reservation.rejection_reason,
                })
                .collect(),
            released: released.iter().map(|k| k.reservation.order_id.0).collect(),
            recorded,
            outbox: &outbox,
        };
        match queries::write_batch(conn, &write).await {
            Ok(()) => {}
            // A product moved, or another batch wrote one of these reservations or message
            // ids since the read (a creation and a cancellation of one order, in two
            // channels): judged again on what that one left.
            Err(error) if platform::messaging::consumer::is_database_contention(&error) => {
                return Err(BatchError::Contended(
                    "what the batch read moved before it was written",
                ));
            }
            Err(error) => return Err(error.into()),
        }
        let mut handled = self.handled.into_iter();
        let handled = self
            .ready
            .into_iter()
            .map(|ready| if ready { handled.next() } else { None })
            .collect();
        Ok((handled, outbox))
    }
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
