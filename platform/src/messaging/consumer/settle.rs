//! Settling a handled batch: each delivery by its own outcome, successes acked together.

use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use tokio_util::sync::CancellationToken;

use super::batch::Received;
use super::failures::{ConsumerStore, FAILURE_LIMIT};
use super::{ConsumeError, MESSAGES_CONSUMED_TOTAL, Outcome, result_label};
use crate::retry::backoff;

/// Rejects poison, acks successes, counts failures (after a pause) and nacks them, or
/// dead-letters the ones that reached [`FAILURE_LIMIT`], and gives back the deliveries kept
/// for contention (still unacked), in their order.
pub(super) async fn settle<S: ConsumerStore>(
    batch: Vec<Received>,
    outcomes: Vec<Outcome>,
    db: &S,
    shutdown: &CancellationToken,
) -> Vec<Received> {
    let mut acks = Vec::new();
    let mut retries = Vec::new();
    let mut kept = Vec::new();
    let mut poison = Vec::new();
    for (received, outcome) in batch.into_iter().zip(outcomes) {
        let _span = received.span.clone().entered();
        let outcome = outcome.map_err(ConsumeError::normalized);
        // A failure is counted once it is known whether it was the message's last.
        if !matches!(outcome, Err(ConsumeError::Retry(_))) {
            metrics::counter!(MESSAGES_CONSUMED_TOTAL, "result" => result_label(&outcome))
                .increment(1);
        }
        match outcome {
            Ok(_) => acks.push(received),
            Err(ConsumeError::Poison(reason)) => {
                tracing::error!(reason, "dead-lettering a message that cannot be handled");
                poison.push(received);
            }
            Err(ConsumeError::Retry(error)) => retries.push((received, format!("{error:#}"))),
            Err(ConsumeError::Contention(reason)) => {
                tracing::debug!(reason, "contended; trying again with the next batch");
                kept.push(received);
            }
        }
    }
    for received in poison {
        let rejected = received
            .delivery
            .reject(BasicRejectOptions { requeue: false })
            .await;
        report(rejected.map(drop));
    }
    let unsettled: Vec<u64> = retries
        .iter()
        .map(|(r, _)| r)
        .chain(&kept)
        .map(|r| r.delivery.delivery_tag)
        .collect();
    let tags: Vec<u64> = acks.iter().map(|r| r.delivery.delivery_tag).collect();
    let plan = ack_plan(&tags, &unsettled);
    for (index, received) in acks.iter().enumerate() {
        let options = match plan.covered_by {
            Some(last) if index < last => continue,
            Some(last) if index == last => BasicAckOptions { multiple: true },
            _ => BasicAckOptions::default(),
        };
        report(received.delivery.ack(options).await.map(drop));
    }
    if !retries.is_empty() {
        let most = retries
            .iter()
            .map(|(r, _)| r.message.previous_deliveries)
            .max()
            .unwrap_or(0);
        wait_before_retry(db, most, shutdown).await;
        retry_or_dead_letter(db, retries).await;
    }
    kept
}

/// Counts each failure against its message id, then nacks it (requeued), or rejects it
/// (dead-lettered) when that was its [`FAILURE_LIMIT`]th. When the count cannot be written
/// (the database went away again), the message is requeued uncounted: the queue's delivery
/// limit is the backstop.
async fn retry_or_dead_letter<S: ConsumerStore>(db: &S, retries: Vec<(Received, String)>) {
    let failed: Vec<(uuid::Uuid, String)> = retries
        .iter()
        .filter_map(|(r, error)| Some((r.message_id?, error.clone())))
        .collect();
    let counts = db.count_failures(&failed).await.unwrap_or_else(|error| {
        tracing::warn!(%error, "could not count the failures; requeueing them uncounted");
        Default::default()
    });
    for (received, error) in retries {
        let failures = received
            .message_id
            .and_then(|id| counts.get(&id).copied())
            .unwrap_or(0);
        let last = failures >= FAILURE_LIMIT;
        let result = if last { "dead_lettered" } else { "retried" };
        metrics::counter!(MESSAGES_CONSUMED_TOTAL, "result" => result).increment(1);
        received.span.in_scope(|| {
            if last {
                tracing::error!(
                    error,
                    failures,
                    "dead-lettering a message that keeps failing"
                );
            } else {
                tracing::warn!(
                    error,
                    failures,
                    previous_deliveries = received.message.previous_deliveries,
                    "handling failed; will retry"
                );
            }
        });
        let settled = if last {
            received
                .delivery
                .reject(BasicRejectOptions { requeue: false })
                .await
        } else {
            received
                .delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    multiple: false,
                })
                .await
        };
        report(settled.map(drop));
    }
}

fn report(settled: lapin::Result<()>) {
    if let Err(error) = settled {
        // The channel is gone; the broker redelivers the message, and the id makes it a no-op.
        tracing::warn!(%error, "could not settle a delivery");
    }
}

/// How to ack a batch's successes.
#[derive(Debug, PartialEq, Eq)]
struct AckPlan {
    /// One `ack(multiple)` on the success at this index settles it and every success before it.
    covered_by: Option<usize>,
}

/// `ack(multiple)` settles every unacked tag of the channel up to its own: it may only cover
/// successes, so it stops below the first tag still unsettled (to be nacked, or kept).
/// Successes after that one are acked one by one. `tags` are ascending (arrival order);
/// a single success below the boundary needs no `multiple`.
fn ack_plan(tags: &[u64], unsettled: &[u64]) -> AckPlan {
    let boundary = unsettled.iter().copied().min().unwrap_or(u64::MAX);
    let below = tags.iter().take_while(|tag| **tag < boundary).count();
    AckPlan {
        covered_by: (below >= 2).then(|| below - 1),
    }
}

/// Pauses before a retry: with backoff per delivery, and for as long as the database is down.
async fn wait_before_retry<S: ConsumerStore>(
    db: &S,
    previous_deliveries: i64,
    shutdown: &CancellationToken,
) {
    let pause = backoff(
        u32::try_from(previous_deliveries).unwrap_or(u32::MAX),
        Duration::from_millis(100),
        Duration::from_secs(5),
    );
    tokio::select! {
        () = shutdown.cancelled() => return,
        () = tokio::time::sleep(pause) => {}
    }
    let mut attempt = 0;
    while !shutdown.is_cancelled() && !db.answers().await {
        attempt += 1;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff(attempt, Duration::from_millis(200), Duration::from_secs(5))) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_successes_are_acked_with_one_multiple_ack() {
        assert_eq!(ack_plan(&[1, 2, 3], &[]).covered_by, Some(2));
    }

    #[test]
    fn a_multiple_ack_stops_below_the_first_unsettled_delivery() {
        // 3 is retried: 1 and 2 go together, 4 and 5 one by one.
        assert_eq!(ack_plan(&[1, 2, 4, 5], &[3]).covered_by, Some(1));
        assert_eq!(ack_plan(&[2, 4], &[1]).covered_by, None);
        assert_eq!(ack_plan(&[1, 4], &[3]).covered_by, None);
    }

    #[test]
    fn one_success_needs_no_multiple_ack() {
        assert_eq!(ack_plan(&[7], &[]).covered_by, None);
    }
}
