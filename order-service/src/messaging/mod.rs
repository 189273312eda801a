//! order-service's side of the saga: the consumer of inventory's events and reconciliation
//! of orders that waited too long. The relay itself lives in `platform::relay`.

pub mod inventory_events;
pub mod reconcile;
