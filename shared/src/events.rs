//! The event contract between the services.
//!
//! Every message body is an [`Envelope`]: the event id (also the AMQP `message_id`, and the key
//! consumers deduplicate on), the event type (also the routing key), a schema version and the
//! payload. Add fields with `#[serde(default)]`; a breaking change bumps [`SCHEMA_VERSION`] of
//! that event; a routing key is never reused for another payload.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{OrderId, ProductId, UserId};
use crate::keys;

/// Version written into every envelope published today.
pub const SCHEMA_VERSION: u16 = 1;

/// One product and how many units of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LineItem {
    pub product_id: ProductId,
    /// Units, 1 to 1,000,000.
    #[schema(minimum = 1, maximum = 1_000_000, example = 2)]
    pub quantity: i64,
}

/// Why inventory refused to reserve an order's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RejectionReason {
    InsufficientStock,
    UnknownProduct,
}

impl RejectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientStock => "insufficient_stock",
            Self::UnknownProduct => "unknown_product",
        }
    }

    /// Reads the stored form strictly: `None` for anything but the two known values.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::InsufficientStock, Self::UnknownProduct]
            .into_iter()
            .find(|reason| reason.as_str() == raw)
    }
}

/// The wrapper every message body shares. `E` is one of the per-exchange event enums below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<E> {
    pub event_id: Uuid,
    pub version: u16,
    pub occurred_at: DateTime<Utc>,
    #[serde(flatten)]
    pub event: E,
}

impl<E: Event> Envelope<E> {
    pub fn new(event: E) -> Self {
        Self {
            event_id: Uuid::now_v7(),
            version: SCHEMA_VERSION,
            occurred_at: Utc::now(),
            event,
        }
    }
}

/// An event knows the routing key it travels under.
pub trait Event {
    fn routing_key(&self) -> &'static str;
}

/// What order-service publishes on `orders.events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event_type", content = "payload")]
pub enum OrderEvent {
    #[serde(rename = "order.created")]
    Created(OrderCreated),
    #[serde(rename = "order.cancelled")]
    Cancelled(OrderCancelled),
}

/// What inventory-service publishes on `inventory.events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event_type", content = "payload")]
pub enum InventoryEvent {
    #[serde(rename = "inventory.reserved")]
    Reserved(StockReserved),
    #[serde(rename = "inventory.rejected")]
    Rejected(StockRejected),
    #[serde(rename = "inventory.released")]
    Released(StockReleased),
}

impl Event for OrderEvent {
    fn routing_key(&self) -> &'static str {
        match self {
            Self::Created(_) => keys::ORDER_CREATED,
            Self::Cancelled(_) => keys::ORDER_CANCELLED,
        }
    }
}

impl Event for InventoryEvent {
    fn routing_key(&self) -> &'static str {
        match self {
            Self::Reserved(_) => keys::INVENTORY_RESERVED,
            Self::Rejected(_) => keys::INVENTORY_REJECTED,
            Self::Released(_) => keys::INVENTORY_RELEASED,
        }
    }
}

/// An order was accepted and waits for stock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderCreated {
    pub order_id: OrderId,
    pub user_id: UserId,
    pub items: Vec<LineItem>,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: Decimal,
}

/// The customer cancelled: give back whatever was deducted for the order, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderCancelled {
    pub order_id: OrderId,
}

/// Every item of the order was deducted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StockReserved {
    pub order_id: OrderId,
    pub items: Vec<LineItem>,
}

/// Nothing was deducted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StockRejected {
    pub order_id: OrderId,
    pub reason: RejectionReason,
}

/// Stock deducted for the order was given back after its cancellation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StockReleased {
    pub order_id: OrderId,
    pub items: Vec<LineItem>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_round_trips_with_its_type_tag() {
        let envelope = Envelope::new(OrderEvent::Cancelled(OrderCancelled {
            order_id: OrderId::new(),
        }));
        let json = serde_json::to_value(&envelope).unwrap_or_default();
        assert_eq!(json["event_type"], "order.cancelled");
        assert_eq!(json["version"], 1);
        let back: Envelope<OrderEvent> = serde_json::from_value(json).expect("parses");
        assert_eq!(back, envelope);
        assert_eq!(back.event.routing_key(), keys::ORDER_CANCELLED);
    }

    #[test]
    fn an_unknown_event_type_does_not_parse() {
        let json = serde_json::json!({
            "event_id": Uuid::nil(), "version": 1, "occurred_at": Utc::now(),
            "event_type": "order.exploded", "payload": {}
        });
        assert!(serde_json::from_value::<Envelope<OrderEvent>>(json).is_err());
    }

    #[test]
    fn a_rejection_reason_is_read_back_strictly() {
        for reason in [
            RejectionReason::InsufficientStock,
            RejectionReason::UnknownProduct,
        ] {
            assert_eq!(RejectionReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(RejectionReason::parse("out_of_stock"), None);
        assert_eq!(RejectionReason::parse("UNKNOWN_PRODUCT"), None);
    }
}
