//! The HTTP edge both services share: every error as problem+json, request ids and trace
//! context, metrics, health endpoints, admin auth, CORS and pagination rules, and how a
//! failed database call is answered.

pub mod access_log;
pub mod admin;
pub mod cors;
mod database_error;
pub mod edge;
pub mod extract;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod outbox_admin;
pub mod pagination;
pub mod rate_limit;
mod refusals;
pub mod trace;

pub use admin::{AdminAuth, AdminToken};
pub use cors::Cors;
pub use database_error::DatabaseError;
pub use edge::{BODY_LIMIT_BYTES, with_edge};
pub use extract::{Json, Path, Query};
pub use rate_limit::RateLimit;
