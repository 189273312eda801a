//! The catalogue: products (create, read, list) and restocks, at most once per idempotency key.

pub mod product;
pub mod queries;
pub mod restock;
pub mod restock_queries;
pub mod routes;
