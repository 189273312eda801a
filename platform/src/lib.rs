//! The plumbing both services run on, so each service's own code is only its domain:
//! configuration helpers, telemetry, shutdown, database bootstrap, the HTTP edge
//! (problem+json everywhere, request ids, trace context, metrics, health, admin auth,
//! pagination), the Redis connection, and the messaging machinery (broker supervision and
//! topology, transactional outbox and relay, consumer loop with deduplication).

pub mod amqp;
pub mod background;
pub mod batch_writes;
pub mod config;
pub mod consumer;
pub mod db;
pub mod http;
pub mod linger;
pub mod outbox;
pub mod redis_conn;
pub mod redis_health;
pub mod relay;
pub mod retry;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
pub mod vacuum;
