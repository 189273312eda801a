//! The outbox relay: publishes committed outbox rows to RabbitMQ.
//!
//! - **Its own process's rows, as they were written.** A writer hands the rows it has just
//!   committed to [`OutboxSignal::committed`]; the relay publishes them from memory, without
//!   reading them back, and marks them sent afterwards, many at once: a mark waits up to
//!   [`RelaySettings::mark_every`] for others, so at a moderate rate one `UPDATE` marks the rows
//!   of many commits. When the pace of hand-offs promises company, the relay waits a moment
//!   after a hand-off so that the next commits go out together ([`crate::messaging::linger`]).
//!   `LISTEN/NOTIFY` was the first design and was measured out: PostgreSQL takes one global
//!   lock at the commit of every notifying transaction, which serialised all order commits
//!   behind each other's WAL flush (most sampled backends waited on `Lock:object`).
//! - **A sweep for rows nobody published**: those of a process that died before publishing
//!   them, those whose publish failed, those an operator sends again. Every
//!   [`RelaySettings::idle_poll`] one autocommit statement asks whether any is due; only then
//!   does a transaction claim a batch with `FOR UPDATE SKIP LOCKED`, so several relays (one per
//!   service instance) never publish the same row at the same time. It takes a row never tried
//!   only once it is older than [`RelaySettings::sweep_after`], long after its own relay would
//!   have published and marked it: a row is published by the sweep and by its writer's relay
//!   both only when that relay took longer than that, and consumers deduplicate. Oldest due
//!   first, in the order of the index of pending rows: an index scan stops at the batch size,
//!   and it marks the entries of rows sent meanwhile as dead, so later claims skip them
//!   without a vacuum. [`OutboxSignal::wake`] runs the sweep at once (same rules).
//! - Publishes persistent, `mandatory` messages on a confirm channel and marks a row sent
//!   only after the broker confirmed it. An unroutable (returned) or nacked message counts
//!   as a failed attempt: retried by the sweep with exponential backoff and jitter, and after
//!   `max_attempts` marked `dead` for an operator (`/admin/outbox?status=dead`). After a nack
//!   the next batch goes out on a fresh channel.
//! - A row published but not yet marked (the process died, the mark failed) is published
//!   again by a sweep: consumers deduplicate.
//! - The sweep commits without waiting for the WAL flush (`synchronous_commit = off` for its
//!   own transaction only): a "sent" mark lost in a crash means a second publish, which the
//!   consumers' deduplication already absorbs.
//! - Checks for shutdown between batches, never in the middle of one; marks what it published
//!   before it returns.

use std::time::Duration;

use lapin::Channel;
use lapin::options::ConfirmSelectOptions;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::messaging::broker::Broker;
use crate::messaging::linger::{Linger, Pace};
use crate::messaging::outbox::{NewOutboxRow, OutboxSignal};
mod own;
mod publish;
pub mod store;
mod sweep;

use own::{Marks, fresh, publish_own};
pub use store::{Claimed, Failure, RelayStore};
use sweep::sweep;

pub const OUTBOX_PUBLISHED_TOTAL: &str = "outbox_published_total";
pub const OUTBOX_PUBLISH_FAILURES_TOTAL: &str = "outbox_publish_failures_total";
pub const OUTBOX_BACKLOG: &str = "outbox_backlog";
pub const OUTBOX_OLDEST_UNSENT_SECONDS: &str = "outbox_oldest_unsent_seconds";

/// Describes the relay's metrics and exposes them at zero.
pub fn register_metrics() {
    crate::telemetry::metrics::handle();
    metrics::describe_counter!(OUTBOX_PUBLISHED_TOTAL, "Outbox rows the broker confirmed");
    metrics::describe_counter!(
        OUTBOX_PUBLISH_FAILURES_TOTAL,
        "Failed publish attempts (unroutable, nacked, no confirm)"
    );
    metrics::describe_gauge!(
        OUTBOX_BACKLOG,
        "Outbox rows not yet sent (pending, due or not)"
    );
    metrics::describe_gauge!(
        OUTBOX_OLDEST_UNSENT_SECONDS,
        metrics::Unit::Seconds,
        "Age of the oldest pending outbox row"
    );
    crate::telemetry::metrics::zero_counter(OUTBOX_PUBLISHED_TOTAL, "", &[]);
    crate::telemetry::metrics::zero_counter(OUTBOX_PUBLISH_FAILURES_TOTAL, "", &[]);
    crate::telemetry::metrics::zero_gauge(OUTBOX_BACKLOG);
    crate::telemetry::metrics::zero_gauge(OUTBOX_OLDEST_UNSENT_SECONDS);
}

#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Rows claimed and published per transaction.
    pub batch_size: i64,
    /// Attempts before a row is marked `dead`.
    pub max_attempts: i32,
    /// First retry delay; doubles per attempt, with jitter, up to `max_backoff`.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// How often the sweep looks for rows nobody published, when nothing wakes it.
    pub idle_poll: Duration,
    /// `OUTBOX_SWEEP_AFTER_MS` (5000): the age from which the sweep takes a row never tried.
    /// Younger ones are their writer's relay's; a hand-off older than half of it is left to
    /// the sweep, so both publish a row only when its relay took longer than that to publish
    /// and mark it.
    pub sweep_after: Duration,
    /// How long a published row may wait for its "sent" mark, so one statement marks many.
    pub mark_every: Duration,
    /// How long a publish may wait for the broker's confirm.
    pub confirm_timeout: Duration,
    /// How long a relay woken by a commit may wait for more rows before publishing.
    pub linger: Linger,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch_size: 200,
            max_attempts: 10,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(60),
            idle_poll: Duration::from_secs(1),
            sweep_after: Duration::from_secs(5),
            mark_every: Duration::from_millis(250),
            confirm_timeout: Duration::from_secs(10),
            linger: Linger::default(),
        }
    }
}

/// A row to publish, handed over or claimed.
#[derive(Debug)]
pub struct OutboxRow {
    pub event_id: Uuid,
    pub exchange: String,
    pub routing_key: String,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
    /// Failed publishes so far.
    pub attempts: i32,
}

impl From<NewOutboxRow> for OutboxRow {
    fn from(row: NewOutboxRow) -> Self {
        Self {
            event_id: row.event_id,
            exchange: row.exchange,
            routing_key: row.routing_key.to_owned(),
            payload: row.payload,
            headers: row.headers,
            attempts: 0,
        }
    }
}

/// Runs until `shutdown`, on the outbox `store` reaches (a `PgPool`, or MySQL's
/// [`crate::storage::mysql::MySqlStore`]).
pub async fn run<S: RelayStore>(
    db: S,
    broker: Broker,
    settings: RelaySettings,
    signal: OutboxSignal,
    shutdown: CancellationToken,
) {
    let mut channel: Option<Channel> = None;
    let mut marks = Marks::default();
    // The first sweep runs at start: rows an earlier run of this process left.
    let mut next_sweep = Instant::now();
    let mut pace = Pace::default();
    let mut woken = false;
    while !shutdown.is_cancelled() {
        if channel.as_ref().is_none_or(|c| !c.status().connected()) {
            channel = match confirm_channel(&broker, &shutdown).await {
                Some(c) => Some(c),
                None => break,
            };
        }
        let Some(publisher) = channel.as_ref() else {
            continue;
        };
        let started = Instant::now();
        let handoff = signal.take();
        if std::mem::take(&mut woken) {
            pace.record(handoff.len(), started, &settings.linger);
        }
        let round = async {
            let own = fresh(handoff.rows, started, settings.sweep_after / 2);
            publish_own(&db, publisher, own, &settings, &mut marks).await?;
            if marks.due(Instant::now(), &settings) {
                marks.flush(&db).await?;
            }
            let mut full = false;
            if handoff.look || started >= next_sweep {
                next_sweep = started + settings.idle_poll;
                // Woken or not, a row never tried is the sweep's only once it is old enough:
                // younger ones may be in a relay's hands, published and not yet marked.
                full = sweep(&db, publisher, &settings).await? as i64 >= settings.batch_size;
            }
            anyhow::Ok(full)
        };
        match round.await {
            // A full batch: more may be waiting, go again at once.
            Ok(true) => {
                next_sweep = Instant::now();
                continue;
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(error = format!("{error:#}"), "outbox relay batch failed");
                channel = None;
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
                continue;
            }
        }
        let wake_at = marks
            .deadline(&settings)
            .map_or(next_sweep, |m| m.min(next_sweep));
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = signal.woken() => woken = true,
            () = tokio::time::sleep_until(wake_at) => {}
        }
        // Woken by a commit: if the pace promises company, the next commits join this batch.
        let first = Instant::now();
        while let Some(deadline) = woken
            .then(|| settings.linger.deadline(&pace, signal.waiting(), first))
            .flatten()
        {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(deadline) => break,
                () = signal.woken() => {}
            }
        }
    }
    // What was handed over meanwhile (the intake's last batches, the last cancels) goes out
    // now rather than waiting for a sweep: once, within one confirm timeout.
    if let Some(publisher) = channel.as_ref().filter(|c| c.status().connected()) {
        let own = fresh(signal.take().rows, Instant::now(), settings.sweep_after / 2);
        if let Err(error) = publish_own(&db, publisher, own, &settings, &mut marks).await {
            tracing::warn!(
                error = format!("{error:#}"),
                "could not publish the last handed-over rows; a sweep sends them"
            );
        }
    }
    if let Err(error) = marks.flush(&db).await {
        tracing::warn!(%error, "could not mark the last published rows sent; a sweep sends them again");
    }
}

async fn confirm_channel(broker: &Broker, shutdown: &CancellationToken) -> Option<Channel> {
    loop {
        let conn = broker.connection(shutdown).await?;
        let attempt = async {
            let channel = conn.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<_, lapin::Error>(channel)
        };
        match attempt.await {
            Ok(channel) => return Some(channel),
            Err(error) => {
                tracing::warn!(%error, "cannot open a confirm channel");
                tokio::select! {
                    () = shutdown.cancelled() => return None,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}
