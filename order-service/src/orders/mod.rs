//! Orders: taking them exactly once per idempotency token (routes, request, placement in
//! batches), showing them, settling them from inventory's answers, waiting for their payment
//! (confirm and expiry) and reconciling the ones whose events were lost.

pub mod amount;
pub mod body;
pub mod cancellation;
pub mod intake;
pub mod payment;
pub mod place;
pub mod place_error;
pub mod queries;
pub mod reconcile;
pub mod request;
pub mod routes;
pub mod settle;
pub mod status;
pub mod view;

pub use request::{CreateOrderRequest, NewOrder};
pub use status::OrderStatus;
