//! The expiry sweep: every instance looks for holds past their deadline every
//! `HOLD_EXPIRY_INTERVAL_MS` and expires them in batches ([`super::queries::expire_due`]),
//! each batch one statement that claims its holds with `SKIP LOCKED`, so instances sweeping at
//! once share the work and never expire a hold twice. A confirm does not wait for the sweep:
//! it checks the deadline itself, so the sweep only decides when the units return.
//!
//! The same loop deletes finished holds and tombstones once they are older than the
//! retention period (`RETENTION_SECS`), and never younger than [`MIN_KEPT`]: a tombstone must
//! outlive any try still on its way, and a repeated try must find its first outcome.

use std::time::Duration;

use platform::messaging::background::keep_running;
use platform::storage::Database;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::queries;
use super::view::HoldState;
use crate::metrics;

/// The most holds one statement expires; a sweep runs batches until one comes back short.
pub const BATCH: i64 = 1_000;

/// Finished holds and tombstones are kept at least this long, whatever the retention.
pub const MIN_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How often the finished holds past retention are deleted.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// When and how the loop runs.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Between two expiry sweeps.
    pub every: Duration,
    /// The retention period of finished holds (raised to [`MIN_KEPT`]).
    pub keep: Duration,
}

/// Runs the sweep on `tasks` until `shutdown`.
pub fn spawn(tasks: &TaskTracker, db: &Database, schedule: Schedule, shutdown: &CancellationToken) {
    let (db, stop) = (db.clone(), shutdown.clone());
    tasks.spawn(keep_running("hold expiry", shutdown.clone(), move || {
        run(db.clone(), schedule, stop.clone())
    }));
}

async fn run(db: Database, schedule: Schedule, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(schedule.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retention = tokio::time::interval(RETENTION_EVERY);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if let Err(error) = sweep(&db).await {
                    // The next tick tries again; a hold due meanwhile is refused a confirm.
                    tracing::warn!(%error, "hold expiry sweep failed");
                }
            }
            _ = retention.tick() => {
                if let Err(error) = delete_finished(&db, schedule.keep, &shutdown).await {
                    tracing::warn!(%error, "retention sweep of finished holds failed");
                }
            }
        }
    }
}

/// Deletes the finished holds and tombstones older than `keep` (raised to [`MIN_KEPT`]), a
/// batch at a time.
pub async fn delete_finished(
    db: &Database,
    keep: Duration,
    shutdown: &CancellationToken,
) -> sqlx::Result<()> {
    let keep_secs = keep.max(MIN_KEPT).as_secs_f64();
    let mut conn = db.acquire().await?;
    while !shutdown.is_cancelled() {
        if queries::delete_finished(conn.conn(), keep_secs, BATCH).await? < BATCH.unsigned_abs() {
            break;
        }
    }
    Ok(())
}

/// Expires every hold due now, in batches; returns how many this call expired.
pub async fn sweep(db: &Database) -> sqlx::Result<i64> {
    let mut conn = db.acquire().await?;
    let mut total = 0;
    loop {
        let swept = queries::expire_due(conn.conn(), BATCH).await?;
        total += swept.expired;
        metrics::hold_transitions(HoldState::Expired, swept.expired.unsigned_abs());
        if swept.expired < BATCH {
            metrics::holds_overdue(swept.overdue);
            return Ok(total);
        }
    }
}
