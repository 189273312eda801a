//! Consumes `order.*` events in batches ([`super::batch`] applies one).
//!
//! For a batch: take the locks of its creations' products in one Redis round trip
//! ([`Locker::try_acquire_many`]); a creation whose product is busy waits for a later batch
//! (contention: kept in process, no delivery spent), and so does every later event of the
//! same order, so an order's events keep their arrival order. The rest are applied in one
//! transaction; the locks are checked right before the commit (a lost lock rolls back, and
//! the batch is tried again), then released.
//!
//! A message that cannot be parsed, or an `order.created` order-service would never send, is
//! poison on its own. When the batch's transaction fails, its messages are applied again one
//! by one, so a message that makes it fail fails alone and the others go through.
//!
//! A batch of one takes the same path: there is no other way to reserve stock for an order.

use std::collections::HashSet;

use platform::consumer::{ConsumeError, Handled, Handler, Message, Outcome};
use platform::outbox::OutboxSignal;
use shared::events::{Envelope, LineItem, OrderEvent};
use shared::ids::{OrderId, ProductId};

use super::batch::{self, BatchError, Event, Work};
use crate::lock::Locker;

#[derive(Debug, Clone)]
pub struct OrderEvents {
    pub db: sqlx::PgPool,
    pub locker: Locker,
    pub outbox: OutboxSignal,
}

impl Handler for OrderEvents {
    async fn handle_batch(&self, messages: &[Message]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(messages.len());
        let mut works = Vec::new();
        let mut positions = Vec::new();
        for (position, message) in messages.iter().enumerate() {
            match parse(message) {
                Ok(work) => {
                    works.push(work);
                    positions.push(position);
                    outcomes.push(None);
                }
                Err(poison) => outcomes.push(Some(Err(poison))),
            }
        }
        let applied = match self.apply(&works).await {
            Err(ConsumeError::Retry(error)) if works.len() > 1 => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    size = works.len(),
                    "applying the batch failed; applying its messages one by one"
                );
                let mut alone = Vec::with_capacity(works.len());
                for work in &works {
                    alone.push(match self.apply(std::slice::from_ref(work)).await {
                        Ok(mut one) => one.pop().unwrap_or_else(|| Err(no_outcome())),
                        Err(error) => Err(error),
                    });
                }
                alone
            }
            Err(error) => {
                let reason = format!("{error:#}");
                let contended = matches!(error, ConsumeError::Contention(_));
                works
                    .iter()
                    .map(|_| {
                        Err(if contended {
                            ConsumeError::Contention(reason.clone())
                        } else {
                            ConsumeError::Retry(anyhow::anyhow!("{reason}"))
                        })
                    })
                    .collect()
            }
            Ok(each) => each,
        };
        for (position, outcome) in positions.into_iter().zip(applied) {
            outcomes[position] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(no_outcome())))
            .collect()
    }
}

fn no_outcome() -> ConsumeError {
    ConsumeError::Retry(anyhow::anyhow!("no outcome"))
}

fn parse(message: &Message) -> Result<Work, ConsumeError> {
    let envelope: Envelope<OrderEvent> = serde_json::from_slice(&message.body)
        .map_err(|e| ConsumeError::Poison(format!("not an order event: {e}")))?;
    let event = match envelope.event {
        OrderEvent::Created(created) => {
            check_items(&created.items)?;
            Event::Created(created)
        }
        OrderEvent::Cancelled(cancelled) => Event::Cancelled(cancelled),
    };
    Ok(Work {
        message_id: envelope.event_id,
        event,
        trace: message.trace.clone(),
    })
}

/// Items order-service would never send (the rules of `shared::line_items`, which it checks
/// too): retrying cannot help, so dead-letter at once.
fn check_items(items: &[LineItem]) -> Result<(), ConsumeError> {
    shared::line_items::check(items)
        .map_err(|error| ConsumeError::Poison(format!("order.created with invalid items: {error}")))
}

impl OrderEvents {
    /// Applies what it can lock of `works` in one transaction: one outcome per work, or the
    /// error of them all.
    async fn apply(&self, works: &[Work]) -> Result<Vec<Outcome>, ConsumeError> {
        let products: Vec<ProductId> = works
            .iter()
            .filter_map(|w| match &w.event {
                Event::Created(created) => Some(created.items.iter().map(|i| i.product_id)),
                Event::Cancelled(_) => None,
            })
            .flatten()
            .collect();
        let partial = self.locker.try_acquire_many(&products).await;
        let busy: HashSet<ProductId> = partial.busy.iter().copied().collect();
        let mut waiting: HashSet<OrderId> = HashSet::new();
        let mut ready = Vec::new();
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(works.len());
        for work in works {
            let order_id = work.event.order_id();
            let blocked = match &work.event {
                Event::Created(created) => {
                    created.items.iter().any(|i| busy.contains(&i.product_id))
                }
                Event::Cancelled(_) => false,
            };
            if blocked || waiting.contains(&order_id) {
                waiting.insert(order_id);
                outcomes.push(Some(Err(ConsumeError::Contention(format!(
                    "a stock lock of order {order_id} is busy"
                )))));
            } else {
                ready.push(work.clone());
                outcomes.push(None);
            }
        }
        let result = self.commit(&ready, &partial.locks).await;
        partial.locks.release().await;
        let mut applied = result?.into_iter();
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| applied.next().map_or_else(|| Err(no_outcome()), Ok)))
            .collect())
    }

    async fn commit(
        &self,
        ready: &[Work],
        locks: &crate::lock::Locks,
    ) -> Result<Vec<Handled>, ConsumeError> {
        if ready.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.db.begin().await?;
        let handled = match batch::apply(&mut tx, ready).await {
            Ok(handled) => handled,
            Err(BatchError::Contended(reason)) => {
                return Err(ConsumeError::Contention(reason.to_owned()));
            }
            Err(BatchError::Database(error)) => return Err(error.into()),
        };
        // A holder whose lock expired or was taken must not commit.
        if let Err(lost) = locks.ensure_held() {
            return Err(ConsumeError::Contention(lost.to_string()));
        }
        tx.commit().await?;
        self.outbox.wake();
        Ok(handled)
    }
}
