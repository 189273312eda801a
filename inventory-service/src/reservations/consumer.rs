//! Consumes `order.*` events in batches ([`super::apply`] applies one).
//!
//! For a batch: take the locks of its creations' products in one Redis round trip
//! ([`Locker::try_acquire_many`]); a creation whose product is busy waits for a later batch
//! (contention: kept in process, no delivery spent), and so does every later event of the
//! same order, so an order's events keep their arrival order. The rest are read and judged
//! with one statement and written with another ([`super::apply`]); the locks are checked
//! right before the write (a lost lock writes nothing, and the batch is tried again), then
//! released. Both statements run on a session that plans them once and passes from batch to
//! batch (`planned_once`, decision 0063).
//!
//! A message that cannot be parsed, or an `order.created` order-service would never send, is
//! poison on its own. A batch that fails as a whole is applied again one message at a time by
//! the consumer loop ([`platform::messaging::consumer::handle`]).
//!
//! A batch of one takes the same path: there is no other way to reserve stock for an order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use platform::messaging::consumer::{ConsumeError, Handled, Handler, Message, Outcome};
use platform::messaging::outbox::OutboxSignal;
use platform::storage::postgres::planned_once::Shelf;
use platform::storage::{Database, Session};
use shared::events::{Envelope, LineItem, OrderEvent};
use shared::ids::ProductId;

use super::apply::{self, BatchError};
use super::work::{Event, Work};
use crate::stock::lock::{Locker, Locks};

#[derive(Debug, Clone)]
pub struct OrderEvents {
    pub db: Database,
    pub locker: Locker,
    pub outbox: OutboxSignal,
    /// The sessions batches leave to the next ones (one per channel, as many as the pool
    /// spares): the read and the write are planned once per session (`planned_once`,
    /// decision 0063), not for every batch.
    sessions: Arc<Shelf>,
}

impl Handler for OrderEvents {
    type Work = Work;

    fn parse(&self, message: &Message) -> Result<Work, ConsumeError> {
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

    async fn apply_batch(&self, works: &[Work]) -> Result<Vec<Outcome>, ConsumeError> {
        self.apply(works).await
    }
}

fn no_outcome() -> ConsumeError {
    ConsumeError::Retry(anyhow::anyhow!("no outcome"))
}

/// Items order-service would never send (the rules of `shared::line_items`, which it checks
/// too): retrying cannot help, so dead-letter at once.
fn check_items(items: &[LineItem]) -> Result<(), ConsumeError> {
    shared::line_items::check(items)
        .map_err(|error| ConsumeError::Poison(format!("order.created with invalid items: {error}")))
}

impl From<BatchError> for ConsumeError {
    fn from(error: BatchError) -> Self {
        match error {
            BatchError::Contended(reason) => ConsumeError::Contention(reason.to_owned()),
            BatchError::Database(error) => error.into(),
        }
    }
}

impl OrderEvents {
    pub fn new(db: Database, locker: Locker, outbox: OutboxSignal) -> Self {
        Self {
            db,
            locker,
            outbox,
            sessions: Arc::new(Shelf::as_the_pool_spares()),
        }
    }

    /// Applies what it can lock of `works`: one outcome per work, or the error of them all.
    async fn apply(&self, works: &[Work]) -> Result<Vec<Outcome>, ConsumeError> {
        let products = apply::products_of(works);
        let partial = self.locker.try_acquire_many(&products).await;
        let busy: HashSet<ProductId> = partial.busy.iter().copied().collect();
        // Cancellations give back without the lock; creations wait for theirs.
        let free = apply::ready(works, &HashMap::new(), &busy);
        let ready: Vec<Work> = works
            .iter()
            .zip(&free)
            .filter(|(_, free)| **free)
            .map(|(work, _)| work.clone())
            .collect();
        let outcomes: Vec<Option<Outcome>> = works
            .iter()
            .zip(free)
            .map(|(work, free)| {
                (!free).then(|| {
                    let order_id = work.event.order_id();
                    Err(ConsumeError::Contention(format!(
                        "a stock lock of order {order_id} is busy"
                    )))
                })
            })
            .collect();
        let result = self.commit(&ready, &partial.locks).await;
        partial.locks.release().await;
        let mut applied = result?.into_iter();
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| match applied.next() {
                    Some(Some(handled)) => Ok(handled),
                    Some(None) => Err(ConsumeError::Contention(
                        "a product row it needs is held by another transaction".to_owned(),
                    )),
                    None => Err(no_outcome()),
                })
            })
            .collect())
    }

    async fn commit(
        &self,
        ready: &[Work],
        locks: &Locks,
    ) -> Result<Vec<Option<Handled>>, ConsumeError> {
        if ready.is_empty() {
            return Ok(Vec::new());
        }
        let mut session = Session::kept(self.sessions.take());
        let mut conn = session.get(&self.db).await?;
        let judgement = apply::read_and_judge(conn.reborrow(), ready).await?;
        // A holder whose lock expired or was taken must not write.
        if let Err(lost) = locks.ensure_held() {
            self.put_back(session);
            return Err(ConsumeError::Contention(lost.to_string()));
        }
        let written = judgement.write(conn).await;
        if matches!(written, Ok(_) | Err(BatchError::Contended(_))) {
            // Otherwise a broken connection or a failover: the session is closed, not kept.
            self.put_back(session);
        }
        let (handled, events) = written?;
        self.outbox.committed(events);
        Ok(handled)
    }

    /// Leaves a PostgreSQL session to the next batch (a MySQL connection goes back to the
    /// pool).
    fn put_back(&self, mut session: Session) {
        session.end_batch(&self.db);
        if let Database::Postgres(pool) = &self.db {
            self.sessions.put_back(session.into_kept(), pool);
        }
    }
}
