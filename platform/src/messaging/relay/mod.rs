//! The outbox relay: publishes committed outbox rows to RabbitMQ.
//!
//! - **Its own process's rows, as they were written.** A writer hands the rows it has just
//!   committed to [`OutboxSignal::committed`]; the relay publishes them from memory, without
//!   reading them back, and marks them sent afterwards, many at once: a mark waits up to
//!   [`RelaySettings::mark_every`] for others, so at a moderate rate one `UPDATE` marks the rows
//!   of many commits. While busy, the relay waits a moment after a hand-off so that the
//!   commits of the next few milliseconds go out together ([`crate::messaging::linger`]).
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
use crate::messaging::outbox::{NewOutboxRow, OutboxSignal};
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
    /// How long a busy relay, woken by a commit, waits for more rows before publishing.
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
struct OutboxRow {
    event_id: Uuid,
    exchange: String,
    routing_key: String,
    payload: serde_json::Value,
    headers: serde_json::Value,
    attempts: i32,
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

/// Runs until `shutdown`.
pub async fn run(
    db: PgPool,
    broker: Broker,
    settings: RelaySettings,
    signal: OutboxSignal,
    shutdown: CancellationToken,
) {
    let mut channel: Option<Channel> = None;
    let mut marks = Marks::default();
    // The first sweep runs at start: rows an earlier run of this process left.
    let mut next_sweep = Instant::now();
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
            () = signal.woken() => {}
            () = tokio::time::sleep_until(wake_at) => {}
        }
        let pause = settings.linger.before_batch(Some(started), Instant::now());
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
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

/// The handed-over rows still this relay's to publish: those handed over less than
/// `max_age` ago. Older ones (the relay was held up: a broker away, a slow confirm) are left
/// to the sweep, which would soon take them too.
fn fresh(rows: Vec<(Instant, NewOutboxRow)>, now: Instant, max_age: Duration) -> Vec<OutboxRow> {
    rows.into_iter()
        .filter(|(handed, _)| now.saturating_duration_since(*handed) < max_age)
        .map(|(_, row)| row.into())
        .collect()
}

/// Confirmed rows of this process not yet marked sent, and since when the oldest waits.
#[derive(Debug, Default)]
struct Marks {
    ids: Vec<Uuid>,
    since: Option<Instant>,
}

impl Marks {
    fn add(&mut self, ids: impl IntoIterator<Item = Uuid>) {
        let before = self.ids.len();
        self.ids.extend(ids);
        if before == 0 && !self.ids.is_empty() {
            self.since = Some(Instant::now());
        }
    }

    fn deadline(&self, settings: &RelaySettings) -> Option<Instant> {
        self.since.map(|since| since + settings.mark_every)
    }

    fn due(&self, now: Instant, settings: &RelaySettings) -> bool {
        self.ids.len() as i64 >= settings.batch_size
            || self.deadline(settings).is_some_and(|at| at <= now)
    }

    /// Marks every row sent in one autocommit statement; kept for the next try if it fails.
    async fn flush(&mut self, db: &PgPool) -> sqlx::Result<()> {
        if self.ids.is_empty() {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE outbox SET status = 'sent', sent_at = now(), updated_at = now()
             WHERE event_id = ANY($1) AND status = 'pending'",
            &self.ids,
        )
        .execute(db)
        .await?;
        self.ids.clear();
        self.since = None;
        Ok(())
    }
}

/// Publishes rows this process committed, `batch_size` at a time; the confirmed ones wait in
/// `marks`, a failed one's attempt is recorded at once (the sweep retries it when due).
async fn publish_own(
    db: &PgPool,
    channel: &Channel,
    rows: Vec<OutboxRow>,
    settings: &RelaySettings,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    let size = usize::try_from(settings.batch_size).unwrap_or(1).max(1);
    for chunk in rows.chunks(size) {
        publish_own_batch(db, channel, chunk, settings, marks).await?;
        if marks.due(Instant::now(), settings) {
            marks.flush(db).await?;
        }
    }
    Ok(())
}

async fn publish_own_batch(
    db: &PgPool,
    channel: &Channel,
    rows: &[OutboxRow],
    settings: &RelaySettings,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    let published = publish_all(channel, rows, settings).await;
    let mut conn = None;
    for (row, outcome) in rows.iter().zip(&published.outcomes) {
        match outcome {
            Ok(()) => marks.add([row.event_id]),
            Err(error) => {
                if conn.is_none() {
                    conn = Some(db.acquire().await.context("recording a failed publish")?);
                }
                if let Some(conn) = conn.as_mut() {
                    record_failure(conn, row, error, settings).await?;
                }
            }
        }
    }
    metrics::counter!(OUTBOX_PUBLISHED_TOTAL)
        .increment(published.outcomes.iter().filter(|o| o.is_ok()).count() as u64);
    if published.channel_broken {
        anyhow::bail!("the publishing channel failed");
    }
    Ok(())
}

/// Claims, publishes and settles one batch of rows nobody published: those due, tried before
/// or at least [`RelaySettings::sweep_after`] old. Returns how many rows it handled.
async fn sweep(db: &PgPool, channel: &Channel, settings: &RelaySettings) -> anyhow::Result<usize> {
    let min_age = settings.sweep_after.as_secs_f64();
    // One autocommit statement while there is nothing to sweep, the usual case.
    let any = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM outbox
            WHERE status = 'pending' AND next_attempt_at <= now()
              AND (attempts > 0 OR created_at <= now() - make_interval(secs => $1))) AS "any!""#,
        min_age,
    )
    .fetch_one(db)
    .await
    .context("looking for outbox rows to sweep")?;
    if !any {
        return Ok(0);
    }
    // Marking rows sent need not wait for its WAL flush: a mark lost in a crash only
    // publishes the rows again, which consumers deduplicate. The relay's next batch (and
    // every other commit waiting on the same flush) goes on without it. Sent with the
    // `BEGIN` as one simple query: one round trip fewer per batch.
    let mut tx = crate::raw::begin_async_commit(db)
        .await
        .context("beginning the relay transaction")?;
    let rows = sqlx::query_as!(
        OutboxRow,
        "SELECT event_id, exchange, routing_key, payload, headers, attempts FROM outbox
         WHERE status = 'pending' AND next_attempt_at <= now()
           AND (attempts > 0 OR created_at <= now() - make_interval(secs => $2))
         ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED",
        settings.batch_size,
        min_age,
    )
    .fetch_all(&mut *tx)
    .await
    .context("claiming outbox rows")?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let published = publish_all(channel, &rows, settings).await;
    let mut sent = Vec::with_capacity(rows.len());
    for (row, outcome) in rows.iter().zip(&published.outcomes) {
        match outcome {
            Ok(()) => sent.push(row.event_id),
            Err(error) => record_failure(&mut tx, row, error, settings).await?,
        }
    }
    sqlx::query!(
        "UPDATE outbox SET status = 'sent', sent_at = now(), updated_at = now()
         WHERE event_id = ANY($1)",
        &sent,
    )
    .execute(&mut *tx)
    .await
    .context("marking outbox rows sent")?;
    tx.commit()
        .await
        .context("committing the relay transaction")?;
    metrics::counter!(OUTBOX_PUBLISHED_TOTAL).increment(sent.len() as u64);
    if published.channel_broken {
        anyhow::bail!("the publishing channel failed");
    }
    Ok(rows.len())
}

/// What the broker said of each row of a batch.
struct Published {
    outcomes: Vec<Result<(), String>>,
    channel_broken: bool,
}

/// Sends the whole batch, then collects the confirms: one round trip for many messages. A
/// failed publish is counted (and its span marked) here; recording it is the caller's.
async fn publish_all(channel: &Channel, rows: &[OutboxRow], settings: &RelaySettings) -> Published {
    let mut pending = Vec::with_capacity(rows.len());
    let mut spans = Vec::with_capacity(rows.len());
    for row in rows {
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
    let mut channel_broken = false;
    let mut outcomes = Vec::with_capacity(rows.len());
    for (confirmed, span) in confirms::collect(pending, settings.confirm_timeout)
        .await
        .into_iter()
        .zip(&spans)
    {
        channel_broken |= confirmed.channel_broken;
        if confirmed.outcome.is_err() {
            span.record("otel.status_code", "ERROR");
            metrics::counter!(OUTBOX_PUBLISH_FAILURES_TOTAL).increment(1);
        }
        outcomes.push(confirmed.outcome);
    }
    Published {
        outcomes,
        channel_broken,
    }
}
