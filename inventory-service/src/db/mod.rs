//! Named queries, each an async fn taking `&mut PgConnection` so it runs inside whatever
//! transaction the caller holds. Queries are checked at run time (the project builds without a
//! database); every SQL string is static.

pub mod deductions;
pub mod products;
pub mod reservations;
pub mod restocks;
pub mod stock;
