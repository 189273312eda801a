//! Consumes `inventory.*` events: each moves an order with a guarded update, in the same
//! transaction that records the message id.
//!
//! Nearly every event is the first verdict on a `PENDING` order; that case is one statement
//! ([`settle::apply_first_verdict`]) instead of a four-round-trip transaction. Everything else
//! (duplicates, late verdicts, a reservation for a cancelled order, releases) takes the
//! general path.

use platform::consumer::{HandleError, Handled, Handler, Message};
use platform::outbox::OutboxSignal;
use shared::events::{Envelope, InventoryEvent};
use sqlx::PgPool;

use crate::settle::{self, Verdict};

#[derive(Debug, Clone)]
pub struct InventoryEvents {
    pub db: PgPool,
    /// A verdict for a cancelled order writes a release request to the outbox.
    pub outbox: OutboxSignal,
}

impl Handler for InventoryEvents {
    async fn handle(&self, message: Message) -> Result<Handled, HandleError> {
        let envelope: Envelope<InventoryEvent> = serde_json::from_slice(&message.body)
            .map_err(|e| HandleError::Poison(format!("not an inventory event: {e}")))?;
        let kind = message.routing_key.as_str();
        let verdict = match &envelope.event {
            InventoryEvent::Reserved(e) => Some((e.order_id, Verdict::Reserved)),
            InventoryEvent::Rejected(e) => Some((e.order_id, Verdict::Rejected(e.reason))),
            // The order was cancelled before its stock came back: nothing left to change.
            InventoryEvent::Released(_) => None,
        };
        if let Some((order_id, verdict)) = verdict {
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
        let transition = match verdict {
            Some((order_id, verdict)) => {
                settle::apply_verdict(&mut tx, order_id, verdict, &message.trace).await?
            }
            None => None,
        };
        tx.commit().await?;
        self.outbox.wake();
        if let Some(transition) = transition {
            transition.record();
        }
        Ok(Handled::Applied)
    }
}
