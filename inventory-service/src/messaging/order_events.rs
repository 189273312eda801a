//! Consumes `order.*` events.
//!
//! `order.created`: take the products' locks (ascending ids), then in one transaction
//! serialise on the order, record the message id, deduct every item with the conditional
//! update (all or nothing), store the reservation and write `inventory.reserved` or
//! `inventory.rejected` to the outbox; check the locks were never lost; commit.
//! - When other tasks of this process already queue for a product, the stock is read first,
//!   and an order it plainly cannot cover is rejected without queueing: in a sale that sold
//!   out, the late orders do not wait on each other. When nobody queues, that read is skipped.
//! - The common cases (first message; one item, or a plain shortfall) do all of it in one
//!   statement ([`db::one_statement`]). The order's primary key in `reservations` then does
//!   the advisory lock's job: a cancellation's tombstone and a reservation cannot both be
//!   written, and whichever comes second fails and is retried, to see the other.
//!
//! `order.cancelled`: in one transaction serialise on the order and record the message id;
//! stock deducted for the order is given back once (`RELEASED`, `inventory.released`); an
//! order never seen gets a tombstone (`CANCELLED`) so its late creation deducts nothing.

use std::collections::HashSet;
use std::time::Duration;

use platform::consumer::{HandleError, Handled, Handler, Message};
use platform::http::TraceContext;
use platform::outbox::{NewOutboxRow, OutboxSignal};
use shared::events::{
    Envelope, InventoryEvent, LineItem, OrderCancelled, OrderCreated, OrderEvent, RejectionReason,
    StockRejected, StockReleased, StockReserved,
};
use shared::ids::{OrderId, ProductId};
use shared::keys;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db;
use crate::db::one_statement::Attempt;
use crate::db::reservations::{Reservation, ReservationState};
use crate::deduction::{AttemptError, Retry};
use crate::domain::deduction::Outcome;
use crate::lock::{LockError, Locker, Locks};

/// How long one delivery keeps retrying lost races before it is handed back to the broker.
const RACE_BUDGET: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct OrderEvents {
    pub db: sqlx::PgPool,
    pub locker: Locker,
    pub outbox: OutboxSignal,
}

impl Handler for OrderEvents {
    async fn handle(&self, message: Message) -> Result<Handled, HandleError> {
        let envelope: Envelope<OrderEvent> = serde_json::from_slice(&message.body)
            .map_err(|e| HandleError::Poison(format!("not an order event: {e}")))?;
        match envelope.event {
            OrderEvent::Created(created) => {
                check_items(&created.items)?;
                self.reserve(envelope.event_id, &created, &message.trace)
                    .await
            }
            OrderEvent::Cancelled(cancelled) => {
                self.release(envelope.event_id, &cancelled, &message.trace)
                    .await
            }
        }
    }
}

/// Items order-service would never send: retrying cannot help, so dead-letter at once.
fn check_items(items: &[LineItem]) -> Result<(), HandleError> {
    let mut seen = HashSet::new();
    let valid = !items.is_empty()
        && items.len() <= 100
        && items.iter().all(|i| {
            i.product_id.0 > 0 && (1..=1_000_000).contains(&i.quantity) && seen.insert(i.product_id)
        });
    if valid {
        Ok(())
    } else {
        Err(HandleError::Poison(
            "order.created with invalid items".into(),
        ))
    }
}

impl OrderEvents {
    async fn reserve(
        &self,
        event_id: Uuid,
        created: &OrderCreated,
        trace: &TraceContext,
    ) -> Result<Handled, HandleError> {
        let mut retry = Retry::new(RACE_BUDGET);
        loop {
            match self.try_reserve(event_id, created, trace).await {
                // A busy lock is worth waiting for here too: a requeue would spend one of the
                // message's few deliveries on contention rather than on a real failure.
                Err(error)
                    if (error.is_retryable()
                        || matches!(error, AttemptError::Lock(LockError::Timeout(_))))
                        && retry.pause().await =>
                {
                    tracing::debug!(%error, order_id = %created.order_id, "retrying a reservation");
                }
                Err(error) => return Err(HandleError::Retry(anyhow::anyhow!("{error}"))),
                Ok(handled) => return Ok(handled),
            }
        }
    }

    async fn try_reserve(
        &self,
        event_id: Uuid,
        created: &OrderCreated,
        trace: &TraceContext,
    ) -> Result<Handled, AttemptError> {
        let products: Vec<_> = created.items.iter().map(|i| i.product_id).collect();
        let (shortfall, locks) = match self.locker.acquire_all_if_idle(&products).await {
            // Nobody here queues for these products: go ahead, the update checks the stock.
            Some(locks) => (None, Some(locks?)),
            // Others queue: an order the stock plainly cannot cover is rejected without
            // queueing, so in a sale that sold out the late orders do not wait on each other.
            None => {
                let shortfall =
                    db::stock::first_shortfall(&mut *self.db.acquire().await?, &created.items)
                        .await?;
                match shortfall {
                    Some(_) => (shortfall, None),
                    None => (None, Some(self.locker.acquire_all(&products).await?)),
                }
            }
        };
        let result = async {
            let first = self
                .in_one_statement(event_id, created, shortfall, locks.as_ref(), trace)
                .await?;
            if let Some(handled) = first {
                self.outbox.wake();
                return Ok(handled);
            }
            let mut tx = self.db.begin().await?;
            db::reservations::lock_order(&mut tx, created.order_id).await?;
            if !platform::inbox::record_once(&mut tx, event_id, keys::ORDER_CREATED).await? {
                return Ok(Handled::Duplicate);
            }
            match db::reservations::find(&mut tx, created.order_id).await? {
                // Seen before (a re-published creation, or a tombstone): answer again, deduct nothing.
                Some(existing) => answer_again(&mut tx, &existing, trace).await?,
                None => {
                    let outcome = match shortfall {
                        Some((reason, product_id)) => Outcome::Rejected { reason, product_id },
                        None => db::stock::deduct_all(&mut tx, &created.items).await?,
                    };
                    record_outcome(&mut tx, created, outcome, trace).await?;
                    // A holder whose lock expired or was taken must not commit.
                    if let Some(locks) = &locks {
                        locks.ensure_held()?;
                    }
                }
            }
            tx.commit().await?;
            self.outbox.wake();
            Ok::<_, AttemptError>(Handled::Applied)
        }
        .await;
        if let Some(locks) = locks {
            locks.release().await;
        }
        result
    }

    /// The first creation message of an order with one item, or one the stock plainly cannot
    /// cover, in one statement ([`db::one_statement`]). `None` when that wrote nothing (the
    /// message or the order was seen before, the stock moved): then the general path decides.
    async fn in_one_statement(
        &self,
        event_id: Uuid,
        created: &OrderCreated,
        shortfall: Option<(RejectionReason, ProductId)>,
        locks: Option<&Locks>,
        trace: &TraceContext,
    ) -> Result<Option<Handled>, AttemptError> {
        let order_id = created.order_id;
        let attempt = match (shortfall, created.items.as_slice()) {
            (Some((reason, _)), items) => {
                let event = outbox_row(
                    InventoryEvent::Rejected(StockRejected { order_id, reason }),
                    trace,
                )?;
                db::one_statement::reject(
                    &mut *self.db.acquire().await?,
                    order_id,
                    items,
                    reason,
                    event_id,
                    keys::ORDER_CREATED,
                    event,
                )
                .await?
            }
            (None, [item]) => {
                let event = outbox_row(
                    InventoryEvent::Reserved(StockReserved {
                        order_id,
                        items: vec![*item],
                    }),
                    trace,
                )?;
                // The statement commits as it runs, so this is the last moment to check.
                if let Some(locks) = locks {
                    locks.ensure_held()?;
                }
                db::one_statement::reserve(
                    &mut *self.db.acquire().await?,
                    order_id,
                    *item,
                    event_id,
                    keys::ORDER_CREATED,
                    event,
                )
                .await?
            }
            (None, _) => return Ok(None),
        };
        Ok((attempt == Attempt::Done).then_some(Handled::Applied))
    }

    async fn release(
        &self,
        event_id: Uuid,
        cancelled: &OrderCancelled,
        trace: &TraceContext,
    ) -> Result<Handled, HandleError> {
        match self.try_release(event_id, cancelled, trace).await {
            // A one-statement reservation committed between the lookup and the tombstone:
            // look again, and release what it deducted.
            Err(sqlx::Error::Database(e)) if e.constraint() == Some(db::reservations::KEY) => {
                Ok(self.try_release(event_id, cancelled, trace).await?)
            }
            result => Ok(result?),
        }
    }

    async fn try_release(
        &self,
        event_id: Uuid,
        cancelled: &OrderCancelled,
        trace: &TraceContext,
    ) -> sqlx::Result<Handled> {
        let order_id = cancelled.order_id;
        let mut tx = self.db.begin().await?;
        db::reservations::lock_order(&mut tx, order_id).await?;
        if !platform::inbox::record_once(&mut tx, event_id, keys::ORDER_CANCELLED).await? {
            return Ok(Handled::Duplicate);
        }
        match db::reservations::find(&mut tx, order_id).await? {
            None => {
                tracing::info!(%order_id, "cancellation before creation: leaving a tombstone");
                db::reservations::insert(&mut tx, order_id, ReservationState::Cancelled, &[], None)
                    .await?;
            }
            Some(reservation) if reservation.state == ReservationState::Applied => {
                db::stock::give_back(&mut tx, &reservation.items).await?;
                db::reservations::set_state(&mut tx, order_id, ReservationState::Released).await?;
                let released = InventoryEvent::Released(StockReleased {
                    order_id,
                    items: reservation.items,
                });
                publish(&mut tx, released, trace).await?;
            }
            // Rejected, released or tombstoned already: nothing was deducted or it is back.
            Some(_) => {}
        }
        tx.commit().await?;
        self.outbox.wake();
        Ok(Handled::Applied)
    }
}

async fn record_outcome(
    conn: &mut PgConnection,
    created: &OrderCreated,
    outcome: Outcome,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let order_id = created.order_id;
    let (state, reason, event) = match outcome {
        Outcome::Applied => (
            ReservationState::Applied,
            None,
            InventoryEvent::Reserved(StockReserved {
                order_id,
                items: created.items.clone(),
            }),
        ),
        Outcome::Rejected { reason, .. } => (
            ReservationState::Rejected,
            Some(reason),
            InventoryEvent::Rejected(StockRejected { order_id, reason }),
        ),
    };
    db::reservations::insert(conn, order_id, state, &created.items, reason).await?;
    publish(conn, event, trace).await
}

/// Repeats the verdict for an order already handled, so order-service can settle even if the
/// first answer was lost (its guarded update makes the repeat harmless).
async fn answer_again(
    conn: &mut PgConnection,
    existing: &Reservation,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let order_id: OrderId = existing.order_id;
    let event = match (existing.state, existing.rejection_reason) {
        (ReservationState::Applied, _) => InventoryEvent::Reserved(StockReserved {
            order_id,
            items: existing.items.clone(),
        }),
        (ReservationState::Rejected, Some(reason)) => {
            InventoryEvent::Rejected(StockRejected { order_id, reason })
        }
        _ => return Ok(()),
    };
    publish(conn, event, trace).await
}

async fn publish(
    conn: &mut PgConnection,
    event: InventoryEvent,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    platform::outbox::enqueue(conn, keys::INVENTORY_EXCHANGE, &Envelope::new(event), trace).await
}

fn outbox_row(event: InventoryEvent, trace: &TraceContext) -> sqlx::Result<NewOutboxRow> {
    NewOutboxRow::new(keys::INVENTORY_EXCHANGE, &Envelope::new(event), trace)
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))
}
