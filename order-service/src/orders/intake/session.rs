//! The intake's own session: a pooled connection, kept from batch to batch, on which each
//! statement is planned once.
//!
//! Every other session plans each statement for the values it runs with
//! (`platform::storage::postgres::PLAN_CACHE_MODE`), which keeps a plan made on a small table
//! from scanning it whole as it grows. The intake runs its statement once per batch, and at a
//! moderate rate a batch holds one order: planning that statement took half as long as
//! running it (0.28 ms against 0.56 ms at 261 orders/s, `pg_stat_statements` with
//! `track_planning`), for every order. So this session plans it once
//! (`plan_cache_mode = force_generic_plan`), and prices sequential scans out
//! (`enable_seqscan = off`) so that the statements it plans once read by index whatever the
//! tables' size when they were prepared (the insert, and the lookup of stored outcomes by
//! token); `e2e/tests/flow/plans.rs` checks their plans on empty tables.
//!
//! The settings stay with this session: it is closed, never returned to the pool, when the
//! intake lets it go. It is still taken from the pool, so a saturated pool still answers
//! `POST /orders` with 503 `busy` (decision 0063).

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// What the intake's session sets, once, on the pooled connection it takes.
pub const SETTINGS: &str = "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off";

/// A pooled connection set up for the intake; it closes when dropped.
pub(super) async fn open(db: &PgPool) -> sqlx::Result<PoolConnection<Postgres>> {
    let mut conn = db.acquire().await?;
    // Before the settings: a connection dropped while they are being set is closed too.
    conn.close_on_drop();
    sqlx::raw_sql(SETTINGS).execute(&mut *conn).await?;
    Ok(conn)
}
