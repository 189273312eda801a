//! order-service integration tests: the real router on a random port, against the real
//! PostgreSQL and Redis, each test with its own database and Redis key prefix.

mod access_log;
mod api_edge;
mod config;
mod consumer_batches;
mod consumer_panics;
mod edge;
mod first_verdict;
mod helpers;
mod idempotency;
mod identity;
mod intake;
mod intake_crash;
mod listing;
mod messaging;
mod mysql;
mod openapi_snapshot;
mod outbox;
mod payment;
mod process;
mod reconciliation;
mod recovery;
mod redis_cluster;
mod redis_hung;
mod rolling_update;
mod settings;
mod strict_states;
mod token_store;
mod vacuum;
mod validation;
