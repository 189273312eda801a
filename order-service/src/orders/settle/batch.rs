//! Settling a batch of what inventory said in two statements: the orders and the message ids
//! read in one, each event judged in arrival order against what the earlier ones left, then
//! the status changes, releases, message ids and outbox rows written in one, guarded by what
//! the judgement relied on.
//! It is the one path for these writes: the consumer's events and what reconciliation learns
//! by asking inventory (events that came in no message) both go through [`settle_all`].
//!
//! The outcome of every event is the one handling them one at a time would give: a
//! duplicate (its id recorded before, or earlier in the batch) changes nothing; a verdict
//! moves a `PENDING` order (a reservation to `AWAITING_PAYMENT` while a payment window is in
//! force, else to `CONFIRMED`); a later verdict for the same order is late and ignored; a
//! reservation for a cancelled or expired order asks for a release again.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use platform::messaging::consumer::Handled;
use platform::messaging::outbox::NewOutboxRow;
use platform::storage::Conn;
use platform::telemetry::TraceContext;
use shared::events::{Envelope, OrderCancelled, OrderEvent};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

use super::queries::{self, SettlementWrite};
use super::{Transition, Verdict, target};
use crate::orders::OrderStatus;
use crate::orders::payment::PaymentWindow;

/// What an event asks of its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Verdict(OrderId, Verdict),
    /// The cancelled or expired order's stock is back.
    Released(OrderId),
}

impl Effect {
    fn order_id(self) -> OrderId {
        match self {
            Self::Verdict(order_id, _) | Self::Released(order_id) => order_id,
        }
    }
}

/// One event of the batch.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The message it came in, recorded so that a redelivery is a duplicate; `None` for what
    /// reconciliation learned from inventory's record.
    pub message: Option<MessageKey>,
    pub effect: Effect,
    pub trace: TraceContext,
}

/// A message's id and routing key, as `processed_messages` records them.
#[derive(Debug, Clone)]
pub struct MessageKey {
    pub id: Uuid,
    pub kind: String,
}

impl Incoming {
    /// What reconciliation learned of an order from inventory's record.
    pub fn learned(effect: Effect) -> Self {
        Self {
            message: None,
            effect,
            trace: TraceContext::new_root(),
        }
    }
}

/// What a batch did: one [`Handled`] per event, and the transitions to count and the outbox
/// rows to hand to the relay after commit.
#[derive(Debug)]
pub struct Settled {
    pub handled: Vec<Handled>,
    pub transitions: Vec<Transition>,
    pub events: Vec<NewOutboxRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// An order left `PENDING` or another consumer recorded one of the message ids since the
    /// batch read them: nothing was written; judge the batch again.
    #[error("an order or a message of the batch changed since the batch read it")]
    Raced,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// An order as the batch sees it so far.
struct Order {
    status: OrderStatus,
    released: bool,
    created_at: DateTime<Utc>,
}

/// Settles `incoming`, a reservation by the payment `window` in force now, in two
/// statements: one reads the orders and the message ids recorded before, the other writes
/// what the batch decided and commits it on its own (or inside the caller's transaction,
/// when there is one). Nothing is locked in between: if an order left `PENDING` or another
/// consumer recorded one of the ids meanwhile, the write undoes itself and this returns
/// [`SettleError::Raced`], for the caller to judge the batch again.
pub async fn settle_all(
    mut conn: Conn<'_>,
    incoming: &[Incoming],
    window: PaymentWindow,
) -> Result<Settled, SettleError> {
    let mut order_ids: Vec<Uuid> = incoming.iter().map(|i| i.effect.order_id().0).collect();
    order_ids.sort_unstable();
    order_ids.dedup();
    let ids: Vec<Uuid> = incoming
        .iter()
        .filter_map(|i| i.message.as_ref().map(|m| m.id))
        .collect();
    let (rows, seen) = queries::read_for_settlement(conn.reborrow(), &order_ids, &ids).await?;
    let mut orders = HashMap::new();
    for row in rows {
        let order = Order {
            status: row.status,
            released: row.released,
            created_at: row.created_at,
        };
        orders.insert(row.order_id, order);
    }
    let mut seen: HashSet<Uuid> = seen.into_iter().collect();

    let mut handled = Vec::with_capacity(incoming.len());
    let mut write = SettlementWrite::default();
    let mut outbox = Vec::new();
    let mut transitions = Vec::new();
    for event in incoming {
        if let Some(message) = &event.message {
            if !seen.insert(message.id) {
                handled.push(Handled::Duplicate);
                continue;
            }
            write.recorded.push((message.id, message.kind.as_str()));
        }
        handled.push(Handled::Applied);
        let order_id = event.effect.order_id();
        let Some(order) = orders.get_mut(&order_id.0) else {
            tracing::warn!(%order_id, "event for an unknown order ignored");
            continue;
        };
        match event.effect {
            Effect::Verdict(_, verdict) if order.status == OrderStatus::Pending => {
                let (to, reason) = target(verdict, window);
                order.status = to;
                write.settled.push((order_id.0, to, reason));
                transitions.push(Transition::left_pending(to, order.created_at));
            }
            Effect::Verdict(_, Verdict::Reserved) if order.status.gave_back() => {
                tracing::info!(%order_id, status = order.status.as_str(), "stock reserved for an order that gave it back; asking for its release");
                outbox.push(release_request(order_id, &event.trace)?);
            }
            Effect::Verdict(..) => {
                tracing::debug!(%order_id, status = order.status.as_str(), "late verdict ignored");
            }
            Effect::Released(_) => {
                if order.status.gave_back() && !order.released {
                    order.released = true;
                    write.released.push(order_id.0);
                }
            }
        }
    }

    let nothing = write.settled.is_empty()
        && write.released.is_empty()
        && write.recorded.is_empty()
        && outbox.is_empty();
    if !nothing {
        write.outbox = &outbox;
        match queries::write_settlement(conn, &write, window).await {
            Ok(()) => {}
            Err(error) if platform::messaging::consumer::is_database_contention(&error) => {
                return Err(SettleError::Raced);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Settled {
        handled,
        transitions,
        events: outbox,
    })
}

/// The `order.cancelled` that asks inventory to give an order's stock back: a new event each
/// time (inventory releases at most once, however many copies arrive). Built here only.
pub(crate) fn release_request(
    order_id: OrderId,
    trace: &TraceContext,
) -> sqlx::Result<NewOutboxRow> {
    let event = Envelope::new(OrderEvent::Cancelled(OrderCancelled { order_id }));
    NewOutboxRow::new(keys::ORDERS_EXCHANGE, &event, trace)
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))
}
