//! The outbox relay: publishes committed outbox rows to RabbitMQ.
//!
//! - Woken in-process by [`OutboxSignal::wake`], which the code calls right after committing
//!   outbox rows, so an event leaves within milliseconds of its commit. A short timer also runs
//!   it, for retries that came due and for rows other instances (or a crashed one) left.
//!   While busy, it waits a moment after the wake-up so that the commits of the next few
//!   milliseconds go out in the same batch ([`crate::messaging::linger`]).
//!   `LISTEN/NOTIFY` was the first design and was measured out: PostgreSQL takes one global
//!   lock at the commit of every notifying transaction, which serialised all order commits
//!   behind each other's WAL flush (most sampled backends waited on `Lock:object`).
//! - Claims a batch with `FOR UPDATE SKIP LOCKED`, so several relays (one per service
//!   instance) never publish the same row at the same time. Oldest due first, in the order of
//!   the index of pending rows: an index scan stops at the batch size, and it marks the
//!   entries of rows sent meanwhile as dead, so later claims skip them without a vacuum.
//! - Publishes persistent, `mandatory` messages on a confirm channel and marks a row sent
//!   only after the broker confirmed it. An unroutable (returned) or nacked message counts
//!   as a failed attempt: retried with exponential backoff and jitter, and after
//!   `max_attempts` marked `dead` for an operator (`/admin/outbox?status=dead`). After a nack
//!   the next batch goes out on a fresh channel.
//! - Publishing happens while the batch's rows are locked: if the process dies after the
//!   publish but before the commit, the rows are published again — consumers deduplicate.
//! - Commits without waiting for the WAL flush (`synchronous_commit = off` for its own
//!   transaction only): a "sent" mark lost in a crash means a second publish, which the
//!   consumers' deduplication already absorbs, while waiting for the flush would stall every
//!   batch behind the disk.
//! - Checks for shutdown between batches, never in the middle of one.

use std::time::Duration;

use anyhow::Context;
use lapin::Channel;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::messaging::broker::Broker;
use crate::messaging::confirms;
use crate::messaging::linger::Linger;
use crate::messaging::outbox::OutboxSignal;
mod publish;

use publish::{properties, publish_span, record_failure};

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
    /// Longest wait between runs when no wake-up arrives.
    pub idle_poll: Duration,
    /// How long a publish may wait for the broker's confirm.
    pub confirm_timeout: Duration,
    /// How long a busy relay, woken by a commit, waits for more rows before claiming.
    pub linger: Linger,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch_size: 200,
            max_attempts: 10,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(60),
            idle_poll: Duration::from_millis(250),
            confirm_timeout: Duration::from_secs(10),
            linger: Linger::default(),
        }
    }
}

#[derive(Debug)]
struct OutboxRow {
    id: i64,
    event_id: Uuid,
    exchange: String,
    routing_key: String,
    payload: serde_json::Value,
    headers: serde_json::Value,
    attempts: i32,
}

/// Runs until `shutdown`.
pub async fn run(
    db: PgPool,
    broker: Broker,
    settings: RelaySettings,
    signal: OutboxSignal,
    shutdown: CancellationToken,
) {
    let mut channel: Option<Channel> = None;
    let mut previous_start;
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
        previous_start = Instant::now();
        match relay_batch(&db, publisher, &settings).await {
            // A full batch: more may be waiting, go again at once.
            Ok(n) if n as i64 >= settings.batch_size => continue,
            Ok(_) => {}
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
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = signal.woken() => {}
            () = tokio::time::sleep(settings.idle_poll) => {}
        }
        let pause = settings
            .linger
            .before_batch(Some(previous_start), Instant::now());
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
        }
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

/// Claims, publishes and settles one batch; returns how many rows it handled.
async fn relay_batch(
    db: &PgPool,
    channel: &Channel,
    settings: &RelaySettings,
) -> anyhow::Result<usize> {
    // Marking rows sent need not wait for its WAL flush: a mark lost in a crash only
    // publishes the rows again, which consumers deduplicate. The relay's next batch (and
    // every other commit waiting on the same flush) goes on without it. Sent with the
    // `BEGIN` as one simple query: one round trip fewer per batch.
    let mut tx = crate::raw::begin_async_commit(db)
        .await
        .context("beginning the relay transaction")?;
    let rows = sqlx::query_as!(
        OutboxRow,
        "SELECT id, event_id, exchange, routing_key, payload, headers, attempts FROM outbox
         WHERE status = 'pending' AND next_attempt_at <= now()
         ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED",
        settings.batch_size,
    )
    .fetch_all(&mut *tx)
    .await
    .context("claiming outbox rows")?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }

    // Send the whole batch, then collect the confirms: one round trip for many messages.
    let mut pending = Vec::with_capacity(rows.len());
    let mut spans = Vec::with_capacity(rows.len());
    for row in &rows {
        // A JSON value's text is its serialisation, which cannot fail.
        let body = row.payload.to_string().into_bytes();
        let (span, headers) = publish_span(row);
        spans.push(span);
        let publish = channel
            .basic_publish(
                row.exchange.as_str().into(),
                row.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                properties(row, headers),
            )
            .await;
        pending.push(publish);
    }
    let mut sent = Vec::with_capacity(rows.len());
    let mut channel_broken = false;
    let confirmed = confirms::collect(pending, settings.confirm_timeout).await;
    for ((row, confirmed), span) in rows.iter().zip(confirmed).zip(&spans) {
        channel_broken |= confirmed.channel_broken;
        match confirmed.outcome {
            Ok(()) => sent.push(row.id),
            Err(error) => {
                span.record("otel.status_code", "ERROR");
                metrics::counter!(OUTBOX_PUBLISH_FAILURES_TOTAL).increment(1);
                record_failure(&mut tx, row, &error, settings).await?;
            }
        }
    }
    sqlx::query!(
        "UPDATE outbox SET status = 'sent', sent_at = now(), updated_at = now() WHERE id = ANY($1)",
        &sent,
    )
    .execute(&mut *tx)
    .await
    .context("marking outbox rows sent")?;
    tx.commit()
        .await
        .context("committing the relay transaction")?;
    metrics::counter!(OUTBOX_PUBLISHED_TOTAL).increment(sent.len() as u64);
    if channel_broken {
        anyhow::bail!("the publishing channel failed");
    }
    Ok(rows.len())
}
