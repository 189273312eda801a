//! Consumes `inventory.*` events in batches: a batch is settled by one read and one write
//! that commits on its own ([`settle::settle_all`]), whatever its size (a batch of one takes
//! the same path), on a session that plans both once and passes from batch to batch
//! (`planned_once`, decision 0063).
//!
//! A message that cannot be parsed is poison on its own. A batch that fails as a whole is
//! settled again one message at a time by the consumer loop ([`platform::messaging::consumer::handle`]).
//!
//! `inventory.released` records on the cancelled or expired order that its stock is back, so
//! reconciliation stops asking inventory about it.

use std::sync::Arc;

use platform::messaging::consumer::{ConsumeError, Handler, Message, Outcome};
use platform::messaging::outbox::OutboxSignal;
use platform::storage::postgres::planned_once::Shelf;
use platform::storage::{Database, Session};
use shared::events::{Envelope, InventoryEvent};

use crate::orders::payment::PaymentWindow;
use crate::orders::settle::{self, Effect, Incoming, MessageKey, SettleError, Verdict};

#[derive(Debug, Clone)]
pub struct InventoryEvents {
    pub db: Database,
    /// A verdict for a cancelled order writes a release request to the outbox.
    pub outbox: OutboxSignal,
    /// `ORDER_PAYMENT_WINDOW_SECS`: whether a reservation makes an order wait for its payment.
    pub window: PaymentWindow,
    /// The sessions batches leave to the next ones (one per channel, as many as the pool
    /// spares): the read and the write are planned once per session (`planned_once`,
    /// decision 0063), not for every batch.
    sessions: Arc<Shelf>,
}

impl Handler for InventoryEvents {
    type Work = Incoming;

    fn parse(&self, message: &Message) -> Result<Incoming, ConsumeError> {
        let envelope: Envelope<InventoryEvent> = serde_json::from_slice(&message.body)
            .map_err(|e| ConsumeError::Poison(format!("not an inventory event: {e}")))?;
        let effect = match &envelope.event {
            InventoryEvent::Reserved(e) => Effect::Verdict(e.order_id, Verdict::Reserved),
            InventoryEvent::Rejected(e) => Effect::Verdict(e.order_id, Verdict::Rejected(e.reason)),
            InventoryEvent::Released(e) => Effect::Released(e.order_id),
        };
        Ok(Incoming {
            message: Some(MessageKey {
                id: envelope.event_id,
                kind: message.routing_key.clone(),
            }),
            effect,
            trace: message.trace.clone(),
        })
    }

    async fn apply_batch(&self, incoming: &[Incoming]) -> Result<Vec<Outcome>, ConsumeError> {
        self.settle(incoming).await
    }
}

impl InventoryEvents {
    pub fn new(db: Database, outbox: OutboxSignal, window: PaymentWindow) -> Self {
        Self {
            db,
            outbox,
            window,
            sessions: Arc::new(Shelf::as_the_pool_spares()),
        }
    }

    /// Settles `incoming` with one read and one write that commits on its own: one outcome
    /// per event, or the error of all.
    async fn settle(&self, incoming: &[Incoming]) -> Result<Vec<Outcome>, ConsumeError> {
        if incoming.is_empty() {
            return Ok(Vec::new());
        }
        let mut session = Session::kept(self.sessions.take());
        let settled =
            match settle::settle_all(session.get(&self.db).await?, incoming, self.window).await {
                Ok(settled) => settled,
                Err(SettleError::Raced) => {
                    self.put_back(session);
                    return Err(ConsumeError::Contention(SettleError::Raced.to_string()));
                }
                // A broken connection or a failover: the session is closed, not kept.
                Err(SettleError::Database(error)) => return Err(error.into()),
            };
        self.put_back(session);
        self.outbox.committed(settled.events);
        settled
            .transitions
            .into_iter()
            .for_each(settle::Transition::record);
        Ok(settled.handled.into_iter().map(Ok).collect())
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
