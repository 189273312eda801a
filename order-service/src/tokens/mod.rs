//! Idempotency tokens: issuing them, the Redis store of their states, the signature that
//! lets a token outlive Redis, and the first response each one is answered with again.

pub mod fingerprint;
pub mod first_response;
pub mod queries;
pub mod routes;
mod scripts;
pub mod secret_queries;
pub mod signed;
mod state;
pub mod store;

pub use first_response::{ResponseStatus, StoredResponse};
