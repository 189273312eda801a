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

use axum::http::HeaderName;

/// The header every request and response carries its id in; the edge sets it, the access
/// log, the metrics and the trace read it.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Seconds a client is asked to wait after a 503 that names no other figure.
const RETRY_AFTER_SECS: &str = "1";
