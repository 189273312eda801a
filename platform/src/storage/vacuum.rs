//! Vacuuming the service's own busiest tables when PostgreSQL's autovacuum is off.
//!
//! The relay moves every outbox row out of the pending state once it is sent; the old row
//! version stays behind, and so does its entry in the index of pending rows, until a vacuum
//! removes them. Without autovacuum nothing ever does: the relay's claim then walks past every
//! row ever sent, and slows down with the table (20 ms per claim after 50,000 orders on the
//! development machine, instead of 0.1 ms after a vacuum). So while `autovacuum` is off, each
//! service vacuums the tables it churns itself; while it is on, this loop does nothing.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Tables every service churns: `outbox` (sent rows), `processed_messages` and
/// `message_failures` (retention).
pub const SHARED_TABLES: [&str; 3] = ["outbox", "processed_messages", "message_failures"];

/// Every `every`, vacuums [`SHARED_TABLES`] and `own_tables` if autovacuum is off; until
/// `shutdown`.
pub async fn run(
    db: PgPool,
    own_tables: &'static [&'static str],
    every: Duration,
    shutdown: CancellationToken,
) {
    let tables: Vec<&str> = SHARED_TABLES.iter().chain(own_tables).copied().collect();
    let mut ticks = tokio::time::interval(every);
    let mut warned = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match vacuum_unless_autovacuum(&db, &tables).await {
            Ok(true) if !warned => {
                warned = true;
                tracing::warn!(
                    tables = tables.join(", "),
                    every_secs = every.as_secs(),
                    "autovacuum is off on this PostgreSQL server: vacuuming the service's busiest tables itself"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "vacuum failed"),
        }
    }
}

/// `true` when it vacuumed (autovacuum is off).
async fn vacuum_unless_autovacuum(db: &PgPool, tables: &[&str]) -> sqlx::Result<bool> {
    let autovacuum =
        sqlx::query_scalar!(r#"SELECT current_setting('autovacuum')::boolean AS "autovacuum!""#)
            .fetch_one(db)
            .await?;
    if autovacuum {
        return Ok(false);
    }
    // The names are this crate's and the services' own constants (see the statement).
    crate::raw::vacuum(db, tables).await?;
    Ok(true)
}
