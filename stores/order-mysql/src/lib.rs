//! order-service's statements on MySQL and MariaDB: its orders ([`orders`]), the payment
//! window ([`payment`]), reconciliation's claims ([`reconcile`]), the intake's group commit
//! ([`placement`]), settling inventory's verdicts ([`settle`]) and the idempotency tokens'
//! outcomes and secret ([`tokens`]). Each one is a checked macro, checked at build time
//! against the orders schema on MariaDB (`migrations/order-service/mysql/`).
//!
//! A crate of its own for the reason `platform-mysql` is one (sqlx checks a crate's
//! statements against one database); it holds the statements and the plain types they read
//! and write, and order-service maps those to its own types. The traps MySQL sets, and how
//! these statements avoid them, are listed in `platform-mysql`'s documentation; the ones met
//! here:
//! - a write PostgreSQL made in one statement (`UPDATE … RETURNING`, data-modifying CTEs) is
//!   several statements in one transaction (a savepoint inside the caller's), which locks
//!   what it will change first, in ascending key order, as the PostgreSQL statement does;
//! - a guard that fell short is [`platform_mysql::serialization_failure`], SQLSTATE 40001,
//!   as PostgreSQL reports it, so order-service's rules read one answer;
//! - a list of ids is joined to its table `STRAIGHT_JOIN … FORCE INDEX (PRIMARY)`: on a small
//!   table MariaDB plans a multi-table `UPDATE` (or a locking read) as a full scan, which
//!   locks every row and waits on rows the statement never changes;
//! - `NOW(6)` is the statement's time, not the transaction's: where PostgreSQL's `now()` made
//!   two columns of a transaction equal, the time is read once and written as a value.

pub mod orders;
pub mod payment;
pub mod placement;
pub mod reconcile;
pub mod settle;
pub mod tokens;

pub use orders::OrderRecord;

/// MySQL's duplicate key error (1062, SQLSTATE 23000).
pub(crate) fn is_duplicate_key(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == 1062)
}
