//! Pure order types: parsing and validation of requests, the status machine. No I/O here.

pub mod amount;
pub mod fingerprint;
pub mod first_response;
pub mod new_order;
pub mod status;

pub use first_response::{ResponseStatus, StoredResponse};
pub use new_order::{CreateOrderRequest, NewOrder};
pub use status::OrderStatus;
