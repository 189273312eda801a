//! Test support for the services' integration and end-to-end tests, never built into a
//! service: isolation against the real PostgreSQL (or MySQL), Redis and RabbitMQ (a database, a Redis
//! key prefix and an AMQP vhost per test), one scenario run on each database backend, child
//! processes, a TCP proxy to cut connections, and private servers (a PostgreSQL node and
//! standby, a MariaDB server, a database server whose clock runs ahead, Redis and Sentinel, a RabbitMQ cluster, an etcd cluster, TLS endpoints) started
//! on ports of their own; and the checks both services' tests
//! share (problem+json answers, the edge's refusals, a drain after SIGTERM, the settings each
//! refuses, the OpenAPI document).

mod amqp_probe;
mod backend;
pub mod captured_log;
mod chaos;
mod edge;
pub mod etcd;
mod http;
mod isolation;
mod logs;
pub mod mariadb;
pub mod mysql;
pub mod openapi;
pub mod postgres;
mod process;
pub mod rabbitmq_cluster;
pub mod redis;
pub mod redis_cluster;
mod schema;
mod scratch;
pub mod sentinel;
pub mod skewed_clock;
pub mod standby;
pub mod tls;
mod wait;

pub use amqp_probe::{AmqpProbe, Received, event_envelope};
pub use backend::{Backend, BackendDatabase, execute_on, uuid_literal};
pub use chaos::ChaosProxy;
pub use edge::{assert_busy, saturated_pool, status_of};
pub use http::{
    REFUSED_BY_EVERY_SERVICE, REFUSED_CREDENTIALS, assert_each_setting_refused,
    assert_limited_past_the_burst, assert_problem, assert_rate_limited, challenge_of, fetch_json,
    one_a_second_after, poll_json, scrape_metric, send_with_credential,
};
pub use isolation::{
    TestDatabase, TestVhost, amqp_server, database_server, record_a_newer_migration, redis_prefix,
    redis_url,
};
pub use logs::init_logs;
pub use process::{
    Draining, KilledOnDrop, NO_BROKER, exit_status, expect_refused_start, free_port,
    service_command, service_command_on, signal,
};
pub use schema::{assert_the_previous_release_starts_on_a_newer_schema, session_setting};
pub use wait::{eventually, wait_until_ok};
