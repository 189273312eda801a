//! inventory-service's side of the saga: reserving stock for new orders and giving it back
//! for cancelled ones. The relay itself lives in `platform::relay`.

mod batch;
pub mod order_events;
