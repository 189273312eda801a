//! Consumes `inventory.*` events in batches: a batch is settled in one transaction
//! ([`settle::settle_all`]) and committed once, whatever its size (a batch of one takes the
//! same path).
//!
//! A message that cannot be parsed is poison on its own. When the batch's transaction
//! fails, its messages are settled again one by one, so a message that makes it fail fails
//! alone and the others go through.
//!
//! `inventory.released` records on the cancelled order that its stock is back, so
//! reconciliation stops asking inventory about it.

use platform::consumer::{ConsumeError, Handler, Message, Outcome};
use platform::outbox::OutboxSignal;
use shared::events::{Envelope, InventoryEvent};
use sqlx::PgPool;

use crate::settle::{self, Effect, Incoming, SettleError, Verdict};

#[derive(Debug, Clone)]
pub struct InventoryEvents {
    pub db: PgPool,
    /// A verdict for a cancelled order writes a release request to the outbox.
    pub outbox: OutboxSignal,
}

fn parse(message: &Message) -> Result<Incoming, ConsumeError> {
    let envelope: Envelope<InventoryEvent> = serde_json::from_slice(&message.body)
        .map_err(|e| ConsumeError::Poison(format!("not an inventory event: {e}")))?;
    let effect = match &envelope.event {
        InventoryEvent::Reserved(e) => Effect::Verdict(e.order_id, Verdict::Reserved),
        InventoryEvent::Rejected(e) => Effect::Verdict(e.order_id, Verdict::Rejected(e.reason)),
        InventoryEvent::Released(e) => Effect::Released(e.order_id),
    };
    Ok(Incoming {
        message_id: envelope.event_id,
        kind: message.routing_key.clone(),
        effect,
        trace: message.trace.clone(),
    })
}

impl Handler for InventoryEvents {
    async fn handle_batch(&self, messages: &[Message]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(messages.len());
        let mut incoming = Vec::new();
        let mut positions = Vec::new();
        for (position, message) in messages.iter().enumerate() {
            match parse(message) {
                Ok(event) => {
                    incoming.push(event);
                    positions.push(position);
                    outcomes.push(None);
                }
                Err(poison) => outcomes.push(Some(Err(poison))),
            }
        }
        let settled = match self.settle(&incoming).await {
            Err(ConsumeError::Retry(error)) if incoming.len() > 1 => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    size = incoming.len(),
                    "settling the batch failed; settling its messages one by one"
                );
                let mut alone = Vec::with_capacity(incoming.len());
                for event in &incoming {
                    let outcome = match self.settle(std::slice::from_ref(event)).await {
                        Ok(mut one) => one.pop(),
                        Err(error) => Some(Err(error)),
                    };
                    alone.push(outcome);
                }
                alone
            }
            Err(error) => {
                let reason = format!("{error:#}");
                incoming
                    .iter()
                    .map(|_| Some(Err(same_error(&error, &reason))))
                    .collect()
            }
            Ok(each) => each.into_iter().map(Some).collect(),
        };
        for (position, outcome) in positions.into_iter().zip(settled) {
            outcomes[position] = outcome;
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ConsumeError::Retry(anyhow::anyhow!("no outcome")))))
            .collect()
    }
}

/// The batch's error, for each of its messages.
fn same_error(error: &ConsumeError, reason: &str) -> ConsumeError {
    match error {
        ConsumeError::Contention(_) => ConsumeError::Contention(reason.to_owned()),
        ConsumeError::Poison(_) => ConsumeError::Poison(reason.to_owned()),
        ConsumeError::Retry(_) => ConsumeError::Retry(anyhow::anyhow!("{reason}")),
    }
}

impl InventoryEvents {
    /// Settles `incoming` in one transaction: one outcome per event, or the error of all.
    async fn settle(&self, incoming: &[Incoming]) -> Result<Vec<Outcome>, ConsumeError> {
        if incoming.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.db.begin().await?;
        let settled = match settle::settle_all(&mut tx, incoming).await {
            Ok(settled) => settled,
            Err(SettleError::Raced) => {
                return Err(ConsumeError::Contention(SettleError::Raced.to_string()));
            }
            Err(SettleError::Database(error)) => return Err(error.into()),
        };
        tx.commit().await?;
        self.outbox.wake();
        settled
            .transitions
            .into_iter()
            .for_each(settle::Transition::record);
        Ok(settled.handled.into_iter().map(Ok).collect())
    }
}
