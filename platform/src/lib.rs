//! The plumbing both services run on, so each service's own code is only its domain:
//! configuration helpers, telemetry, shutdown, database bootstrap, the HTTP edge
//! (problem+json everywhere, request ids, metrics, health, admin auth, pagination),
//! and the Redis connection.

pub mod amqp;
pub mod background;
pub mod config;
pub mod consumer;
pub mod db;
pub mod http;
pub mod inbox;
pub mod outbox;
pub mod redis_conn;
pub mod relay;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
