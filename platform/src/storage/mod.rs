//! Storage: PostgreSQL (the pool, finding the primary, vacuum while autovacuum is off),
//! Redis (the connection, Sentinel, the health gate every call goes through) and the private
//! CAs both are verified with.

pub mod postgres;
pub mod redis;
pub mod tls;
pub mod vacuum;
