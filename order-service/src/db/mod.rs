//! Named queries. Each takes `&mut PgConnection`, so it works alone or inside a transaction.

pub mod idempotency;
pub mod orders;
pub mod placement;
pub mod token_secret;
