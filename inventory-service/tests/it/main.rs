//! The one integration-test binary: real PostgreSQL and MariaDB (the scenarios of
//! `testkit::on_each_backend!` run on both), Redis and RabbitMQ, each test isolated by its own
//! database, Redis key prefix and AMQP vhost.

mod auth;
mod batch;
mod batching;
mod concurrency;
mod crash;
mod database_lock;
mod deduction_batch;
mod deductions;
mod delivery_limit;
mod edge;
mod etcd;
mod helpers;
mod holds;
mod liveness;
mod lock;
mod lock_matrix;
mod openapi;
mod operations;
mod order_events;
mod products;
mod redis_cluster;
mod redis_hung;
mod redlock;
mod restock;
mod rolling_update;
mod sentinel;
mod settings;
mod standby;
mod tls;
mod validation;
