//! Pure order types: parsing and validation of requests, the status machine. No I/O here.

pub mod amount;
pub mod fingerprint;
pub mod new_order;
pub mod status;

pub use new_order::{CreateOrderRequest, NewOrder};
pub use status::OrderStatus;
