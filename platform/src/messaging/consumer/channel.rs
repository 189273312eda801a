//! One channel: its subscription, and its loop: take what is buffered as a batch (waiting a
//! moment for more while busy), hand it to the one policy of [`super::batch`], settle each
//! delivery by its outcome, and keep contended ones in process for the next batch.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batch::{self, Received};
use super::send_back::{KEPT_ROUNDS, send_back};
use super::{ConsumerSettings, ConsumerStore, Handler, settle};
use crate::messaging::linger::Pace;
use crate::retry::backoff;

/// Pauses before kept (contended) messages are tried again when nothing new arrives.
const CONTENTION_BASE: Duration = Duration::from_millis(2);
const CONTENTION_CAP: Duration = Duration::from_millis(100);

/// Why a channel's loop returned.
#[derive(Debug)]
pub(super) enum Ended {
    /// `shutdown` came: the subscription was cancelled and the channel closed.
    Shutdown,
    /// The subscription ended under the loop: the broker closed the channel or cancelled
    /// its consumer, or the connection died. The error the stream reported last, if any.
    Lost(Option<lapin::Error>),
}

/// Opens channel `n` on `conn` with the consumer's QoS and subscribes it to the queue. The
/// channel confirms publishes: it sends kept messages back ([`super::send_back`]).
pub(super) async fn subscribe(
    conn: &lapin::Connection,
    n: usize,
    settings: &ConsumerSettings,
) -> lapin::Result<(lapin::Channel, lapin::Consumer)> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    channel
        .basic_qos(settings.prefetch, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            settings.queue.into(),
            tag(settings, n).as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((channel, consumer))
}

/// Counts a round against every kept message and sends back those whose budget is spent;
/// what stays kept, in arrival order.
async fn spend_a_round(
    channel: &lapin::Channel,
    queue: &str,
    kept: Vec<Received>,
) -> Vec<Received> {
    let (due, mut kept): (Vec<Received>, Vec<Received>) = kept
        .into_iter()
        .map(|mut received| {
            received.rounds += 1;
            received
        })
        .partition(|received| received.rounds >= KEPT_ROUNDS);
    if due.is_empty() {
        return kept;
    }
    kept.extend(send_back(channel, queue, due).await);
    kept.sort_by_key(|received| received.delivery.delivery_tag);
    kept
}

type Next = Option<Result<lapin::message::Delivery, lapin::Error>>;

/// Adds what the stream gave to the batch (an error is logged and remembered); `true` when the
/// stream has ended.
fn take(next: Next, batch: &mut Vec<Received>, last_error: &mut Option<lapin::Error>) -> bool {
    match next {
        Some(Ok(delivery)) => batch.push(Received::new(delivery)),
        Some(Err(error)) => {
            tracing::warn!(%error, "consumer stream error");
            *last_error = Some(error);
        }
        None => return true,
    }
    false
}

/// Adds what the stream has already buffered, up to `limit` in the batch; `true` when the
/// stream has ended.
fn drain_buffered(
    deliveries: &mut (impl futures_util::Stream<Item = lapin::Result<lapin::message::Delivery>> + Unpin),
    batch: &mut Vec<Received>,
    limit: usize,
    last_error: &mut Option<lapin::Error>,
) -> bool {
    while batch.len() < limit {
        match deliveries.next().now_or_never() {
            Some(next) => {
                if take(next, batch, last_error) {
                    return true;
                }
            }
            None => break,
        }
    }
    false
}

/// Channel `n`'s consumer tag: the consumer's own, numbered.
fn tag(settings: &ConsumerSettings, n: usize) -> String {
    format!("{}-{n}", settings.consumer_tag)
}

/// One subscribed channel's loop, until its subscription ends or `shutdown`.
pub(super) async fn consume<H: Handler, S: ConsumerStore>(
    (channel, consumer): (lapin::Channel, lapin::Consumer),
    n: usize,
    settings: &ConsumerSettings,
    handler: &H,
    db: &S,
    shutdown: &CancellationToken,
) -> Ended {
    tracing::info!(queue = settings.queue, channel = n, "consuming");
    let stop = shutdown.clone();
    let mut deliveries = std::pin::pin!(consumer.take_until(stop.cancelled_owned()));
    let limit = usize::from(settings.prefetch.max(1));
    // Kept for contention: older than anything still in the stream, so they go first.
    let mut kept: Vec<Received> = Vec::new();
    let mut contended_rounds = 0;
    let mut ended = false;
    let mut pace = Pace::default();
    let mut last_error = None;
    while !ended {
        let mut batch = std::mem::take(&mut kept);
        let carried = batch.len();
        let first = if batch.is_empty() {
            Some(deliveries.next().await)
        } else {
            let pause = backoff(contended_rounds, CONTENTION_BASE, CONTENTION_CAP);
            tokio::select! {
                next = deliveries.next() => Some(next),
                () = tokio::time::sleep(pause) => None,
            }
        };
        if let Some(next) = first {
            ended = take(next, &mut batch, &mut last_error);
        }
        if ended && batch.is_empty() {
            break;
        }
        let first_at = Instant::now();
        // What is already buffered joins at once; then, if the pace promises company, what
        // arrives before the linger's deadline ([`crate::messaging::linger`]).
        ended = ended || drain_buffered(&mut deliveries, &mut batch, limit, &mut last_error);
        if !ended && !batch.is_empty() {
            while let Some(deadline) = settings
                .linger
                .deadline(&pace, batch.len(), first_at)
                .filter(|_| batch.len() < limit)
            {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep_until(deadline) => break,
                    next = deliveries.next() => {
                        if take(next, &mut batch, &mut last_error) {
                            ended = true;
                            break;
                        }
                    }
                }
            }
        }
        ended = ended || drain_buffered(&mut deliveries, &mut batch, limit, &mut last_error);
        if batch.is_empty() {
            continue;
        }
        pace.record(batch.len() - carried, Instant::now(), &settings.linger);
        let outcomes = batch::handle_received(handler, &batch).await;
        kept = settle::settle(batch, outcomes, db, shutdown).await;
        kept = spend_a_round(&channel, settings.queue, kept).await;
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
            .basic_cancel(
                tag(settings, n).as_str().into(),
                BasicCancelOptions::default(),
            )
            .await
            .ok();
        channel.close(200, "shutting down".into()).await.ok();
        return Ended::Shutdown;
    }
    // A consumer the broker cancelled leaves its channel open, holding what it was sent: close
    // it, so those deliveries go back to the queue before a new channel takes over.
    if channel.status().connected() {
        channel.close(200, "resubscribing".into()).await.ok();
    }
    Ended::Lost(last_error)
}
