//! The sweep: rows nobody published (a writer that died before publishing, a failed attempt,
//! an operator's retry), claimed `FOR UPDATE SKIP LOCKED` so several relays never publish one
//! at the same time.

use anyhow::Context;
use lapin::Channel;
use sqlx::PgPool;

use super::publish::{publish_all, record_failure};
use super::{OUTBOX_PUBLISHED_TOTAL, OutboxRow, RelaySettings};

/// Claims, publishes and settles one batch of rows nobody published: those due, tried before
/// or at least [`RelaySettings::sweep_after`] old. Returns how many rows it handled.
pub(super) async fn sweep(
    db: &PgPool,
    channel: &Channel,
    settings: &RelaySettings,
) -> anyhow::Result<usize> {
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
