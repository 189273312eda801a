//! inventory-service's side of the saga: reserving stock for new orders and giving it back
//! for cancelled ones ([`consumer`], `apply`), and what happened to each order's stock
//! ([`queries`], [`routes`]). The relay itself lives in `platform::messaging::relay`.

mod apply;
pub mod consumer;
mod judge;
pub mod queries;
pub mod routes;
mod work;
