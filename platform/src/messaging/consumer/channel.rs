//! One channel's loop: take what is buffered as a batch (waiting a moment for more while
//! busy), hand it to the one policy of [`super::batch`], settle each delivery by its outcome,
//! and keep contended ones in process for the next batch.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batch::{self, Received};
use super::{ConsumerSettings, Handler, settle};
use crate::retry::backoff;

/// Pauses before kept (contended) messages are tried again when nothing new arrives.
const CONTENTION_BASE: Duration = Duration::from_millis(2);
const CONTENTION_CAP: Duration = Duration::from_millis(100);

/// One channel's loop, until its subscription ends or `shutdown`; `false` when it could not
/// subscribe.
pub(super) async fn consume<H: Handler>(
    conn: &lapin::Connection,
    n: usize,
    settings: &ConsumerSettings,
    handler: &H,
    db: &PgPool,
    shutdown: &CancellationToken,
) -> bool {
    let tag = format!("{}-{n}", settings.consumer_tag);
    let subscription = async {
        let channel = conn.create_channel().await?;
        channel
            .basic_qos(settings.prefetch, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                settings.queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok::<_, lapin::Error>((channel, consumer))
    };
    let (channel, consumer) = match subscription.await {
        Ok(pair) => pair,
        Err(error) => {
            tracing::warn!(%error, queue = settings.queue, "cannot subscribe; retrying");
            return false;
        }
    };
    tracing::info!(queue = settings.queue, channel = n, "consuming");
    let stop = shutdown.clone();
    let mut deliveries = std::pin::pin!(consumer.take_until(stop.cancelled_owned()));
    let limit = usize::from(settings.prefetch.max(1));
    // Kept for contention: older than anything still in the stream, so they go first.
    let mut kept: Vec<Received> = Vec::new();
    let mut contended_rounds = 0;
    let mut ended = false;
    let mut previous_start = None;
    while !ended {
        let mut batch = std::mem::take(&mut kept);
        let first = if batch.is_empty() {
            Some(deliveries.next().await)
        } else {
            let pause = backoff(contended_rounds, CONTENTION_BASE, CONTENTION_CAP);
            tokio::select! {
                next = deliveries.next() => Some(next),
                () = tokio::time::sleep(pause) => None,
            }
        };
        match first {
            Some(Some(Ok(delivery))) => batch.push(Received::new(delivery)),
            Some(Some(Err(error))) => tracing::warn!(%error, "consumer stream error"),
            Some(None) if batch.is_empty() => break,
            Some(None) => ended = true,
            None => {}
        }
        // While busy, what arrives within the linger joins the batch; when idle, only what
        // is already buffered.
        let pause = settings.linger.before_batch(previous_start, Instant::now());
        if !pause.is_zero() && !batch.is_empty() && !ended {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        while !ended && batch.len() < limit {
            match deliveries.next().now_or_never() {
                Some(Some(Ok(delivery))) => batch.push(Received::new(delivery)),
                Some(Some(Err(error))) => tracing::warn!(%error, "consumer stream error"),
                Some(None) => {
                    ended = true;
                    break;
                }
                None => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        previous_start = Some(Instant::now());
        let outcomes = batch::handle_received(handler, &batch).await;
        kept = settle::settle(batch, outcomes, db, shutdown).await;
        contended_rounds = if kept.is_empty() {
            0
        } else {
            contended_rounds.saturating_add(1)
        };
        ended |= shutdown.is_cancelled();
    }
    // Kept messages are dropped unacked: closing the channel returns them to the queue.
    drop(kept);
    if shutdown.is_cancelled() {
        channel
            .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
            .await
            .ok();
        channel.close(200, "shutting down".into()).await.ok();
    }
    true
}
