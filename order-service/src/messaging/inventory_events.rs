//! Consumes `inventory.*` events: each moves an order with a guarded update, in the same
//! transaction that records the message id.
//!
//! Nearly every event is the first verdict on a `PENDING` order; that case is one statement
//! ([`settle::apply_first_verdict`]) instead of a four-round-trip transaction. Everything else
//! (duplicates, late verdicts, a reservation for a cancelled order, releases) takes the
//! general path.
//!
//! `inventory.released` records on the cancelled order that its stock is back, so
//! reconciliation stops asking inventory about it.

use platform::consumer::{HandleError, Handled, Handler, Message};
use platform::outbox::OutboxSignal;
use shared::events::{Envelope, InventoryEvent};
use shared::ids::OrderId;
use sqlx::PgPool;

use crate::db;
use crate::settle::{self, Verdict};

#[derive(Debug, Clone)]
pub struct InventoryEvents {
    pub db: PgPool,
    /// A verdict for a cancelled order writes a release request to the outbox.
    pub outbox: OutboxSignal,
}

/// What an event asks of its order.
#[derive(Debug, Clone, Copy)]
enum Effect {
    Verdict(OrderId, Verdict),
    /// The cancelled order's stock is back.
    Released(OrderId),
}

impl Handler for InventoryEvents {
    async fn handle(&self, message: Message) -> Result<Handled, HandleError> {
        let envelope: Envelope<InventoryEvent> = serde_json::from_slice(&message.body)
            .map_err(|e| HandleError::Poison(format!("not an inventory event: {e}")))?;
        let kind = message.routing_key.as_str();
        let effect = match &envelope.event {
            InventoryEvent::Reserved(e) => Effect::Verdict(e.order_id, Verdict::Reserved),
            InventoryEvent::Rejected(e) => Effect::Verdict(e.order_id, Verdict::Rejected(e.reason)),
            InventoryEvent::Released(e) => Effect::Released(e.order_id),
        };
        if let Effect::Verdict(order_id, verdict) = effect {
            let mut conn = self.db.acquire().await?;
            let first =
                settle::apply_first_verdict(&mut conn, order_id, verdict, envelope.event_id, kind)
                    .await?;
            if let Some(transition) = first {
                transition.record();
                return Ok(Handled::Applied);
            }
        }
        let mut tx = self.db.begin().await?;
        if !platform::inbox::record_once(&mut tx, envelope.event_id, kind).await? {
            return Ok(Handled::Duplicate);
        }
        let transition = match effect {
            Effect::Verdict(order_id, verdict) => {
                settle::apply_verdict(&mut tx, order_id, verdict, &message.trace).await?
            }
            Effect::Released(order_id) => {
                db::orders::record_released(&mut tx, order_id).await?;
                None
            }
        };
        tx.commit().await?;
        self.outbox.wake();
        if let Some(transition) = transition {
            transition.record();
        }
        Ok(Handled::Applied)
    }
}
