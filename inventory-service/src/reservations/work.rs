//! What the consumer hands a batch: each message parsed into the order event it carries,
//! with its id and trace. A leaf, so that judging and applying a batch share it without
//! importing each other.

use platform::telemetry::TraceContext;
use shared::events::{OrderCancelled, OrderCreated};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

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
