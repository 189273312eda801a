//! Test support for the services' integration and end-to-end tests, never built into a
//! service: isolation against the real PostgreSQL, Redis and RabbitMQ (a database, a Redis
//! key prefix and an AMQP vhost per test), child processes, a TCP proxy to cut connections,
//! and private servers (a PostgreSQL node and standby, Redis and Sentinel, a RabbitMQ
//! cluster, TLS endpoints) started on ports of their own.

mod amqp_probe;
pub mod captured_log;
mod chaos;
mod http;
mod isolation;
mod logs;
pub mod postgres;
mod process;
pub mod rabbitmq_cluster;
pub mod redis;
pub mod sentinel;
pub mod standby;
pub mod tls;
mod wait;

pub use amqp_probe::{AmqpProbe, Received};
pub use chaos::ChaosProxy;
pub use http::{
    REFUSED_CREDENTIALS, assert_each_setting_refused, challenge_of, scrape_metric,
    send_with_credential,
};
pub use isolation::{
    TestDatabase, TestVhost, amqp_server, database_server, record_a_newer_migration, redis_prefix,
    redis_url,
};
pub use logs::init_logs;
pub use process::{
    KilledOnDrop, exit_status, expect_refused_start, free_port, service_command, signal,
};
pub use wait::eventually;
