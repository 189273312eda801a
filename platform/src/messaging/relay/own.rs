//! The rows this process committed, handed over in memory: published as they are, and marked
//! sent many at a time.

use std::time::Duration;

use lapin::Channel;
use tokio::time::Instant;
use uuid::Uuid;

use super::publish::publish_all;
use super::store::{Failure, RelayStore};
use super::{OUTBOX_PUBLISHED_TOTAL, OutboxRow, RelaySettings};
use crate::messaging::outbox::NewOutboxRow;

/// The handed-over rows still this relay's to publish: those handed over less than
/// `max_age` ago. Older ones (the relay was held up: a broker away, a slow confirm) are left
/// to the sweep, which would soon take them too.
pub(super) fn fresh(
    rows: Vec<(Instant, NewOutboxRow)>,
    now: Instant,
    max_age: Duration,
) -> Vec<OutboxRow> {
    rows.into_iter()
        .filter(|(handed, _)| now.saturating_duration_since(*handed) < max_age)
        .map(|(_, row)| row.into())
        .collect()
}

/// Confirmed rows of this process not yet marked sent, and since when the oldest waits.
#[derive(Debug, Default)]
pub(super) struct Marks {
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

    pub(super) fn deadline(&self, settings: &RelaySettings) -> Option<Instant> {
        self.since.map(|since| since + settings.mark_every)
    }

    pub(super) fn due(&self, now: Instant, settings: &RelaySettings) -> bool {
        self.ids.len() as i64 >= settings.batch_size
            || self.deadline(settings).is_some_and(|at| at <= now)
    }

    /// Marks every row sent in one autocommit statement; kept for the next try if it fails.
    pub(super) async fn flush<S: RelayStore>(&mut self, store: &S) -> anyhow::Result<()> {
        if self.ids.is_empty() {
            return Ok(());
        }
        store.mark_sent(&self.ids).await?;
        self.ids.clear();
        self.since = None;
        Ok(())
    }
}

/// Publishes rows this process committed, `batch_size` at a time; the confirmed ones wait in
/// `marks`, a failed one's attempt is recorded at once (the sweep retries it when due).
pub(super) async fn publish_own<S: RelayStore>(
    store: &S,
    channel: &Channel,
    rows: Vec<OutboxRow>,
    settings: &RelaySettings,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    let size = usize::try_from(settings.batch_size).unwrap_or(1).max(1);
    for chunk in rows.chunks(size) {
        publish_own_batch(store, channel, chunk, settings, marks).await?;
        if marks.due(Instant::now(), settings) {
            marks.flush(store).await?;
        }
    }
    Ok(())
}

async fn publish_own_batch<S: RelayStore>(
    store: &S,
    channel: &Channel,
    rows: &[OutboxRow],
    settings: &RelaySettings,
    marks: &mut Marks,
) -> anyhow::Result<()> {
    let published = publish_all(channel, rows, settings).await;
    let mut failures = Vec::new();
    for (row, outcome) in rows.iter().zip(&published.outcomes) {
        match outcome {
            Ok(()) => marks.add([row.event_id]),
            Err(error) => failures.push(Failure::of(row, error, settings)),
        }
    }
    store.record_failures(&failures).await?;
    metrics::counter!(OUTBOX_PUBLISHED_TOTAL)
        .increment(published.outcomes.iter().filter(|o| o.is_ok()).count() as u64);
    if published.channel_broken {
        anyhow::bail!("the publishing channel failed");
    }
    Ok(())
}
