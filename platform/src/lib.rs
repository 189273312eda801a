//! The plumbing both services run on, in layers, so each service's own code is only its
//! domain:
//! - [`http`]: the edge (problem+json everywhere, request ids, metrics, health, admin auth,
//!   CORS, rate limits, pagination);
//! - [`messaging`]: the broker and its topology, the transactional outbox and its relay, the
//!   consumer loop, the ids of processed messages;
//! - [`storage`]: PostgreSQL (pools, the primary, vacuum), Redis (connection, Sentinel,
//!   health) and the TLS both use;
//! - [`telemetry`]: logs, traces and the trace context events carry;
//! - [`config`], [`retry`] and [`shutdown`]: the helpers every layer uses;
//! - [`runtime`]: the Tokio runtime each binary runs on.

pub mod config;
pub mod http;
pub mod messaging;
mod raw;
pub mod retry;
pub mod runtime;
pub mod shutdown;
pub mod startup;
pub mod storage;
pub mod telemetry;
