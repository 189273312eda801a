//! The sweep: rows nobody published (a writer that died before publishing, a failed attempt,
//! an operator's retry), claimed `FOR UPDATE SKIP LOCKED` so several relays never publish one
//! at the same time.

use lapin::Channel;

use super::publish::publish_all;
use super::store::{Claimed, Failure, RelayStore};
use super::{OUTBOX_PUBLISHED_TOTAL, RelaySettings};

/// Claims, publishes and settles one batch of rows nobody published: those due, tried before
/// or at least [`RelaySettings::sweep_after`] old. Returns how many rows it handled.
pub(super) async fn sweep<S: RelayStore>(
    store: &S,
    channel: &Channel,
    settings: &RelaySettings,
) -> anyhow::Result<usize> {
    // One autocommit statement while there is nothing to sweep, the usual case.
    if !store.any_due(settings.sweep_after).await? {
        return Ok(0);
    }
    let claim = store
        .claim(settings.batch_size, settings.sweep_after)
        .await?;
    let rows = claim.rows();
    if rows.is_empty() {
        claim.settle(&[], &[]).await?;
        return Ok(0);
    }
    let published = publish_all(channel, rows, settings).await;
    let mut sent = Vec::with_capacity(rows.len());
    let mut failures = Vec::new();
    for (row, outcome) in rows.iter().zip(&published.outcomes) {
        match outcome {
            Ok(()) => sent.push(row.event_id),
            Err(error) => failures.push(Failure::of(row, error, settings)),
        }
    }
    let handled = rows.len();
    claim.settle(&sent, &failures).await?;
    metrics::counter!(OUTBOX_PUBLISHED_TOTAL).increment(sent.len() as u64);
    if published.channel_broken {
        anyhow::bail!("the publishing channel failed");
    }
    Ok(handled)
}
