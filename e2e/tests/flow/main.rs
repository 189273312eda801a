//! End-to-end: both services running, events over a real RabbitMQ vhost, driven over HTTP.
//! Each test checks the invariants of docs/contract.md §4.3 that its scenario touches.

mod flash_sale;
mod helpers;
mod identity;
mod inventory_process;
mod layout;
mod lost_cancellation;
mod otlp;
mod outages;
mod paused_inventory;
mod plans;
mod saga;
