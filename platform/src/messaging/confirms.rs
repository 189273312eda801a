//! Collecting the broker's confirms of a batch sent on a confirm channel (the relay's, and a
//! consumer's sending back what it kept too long), against one deadline: a broker
//! that confirms nothing (a quorum queue without a leader) costs the batch one timeout, not
//! one per message.

use std::future::Future;
use std::time::Duration;

use lapin::Confirmation;

/// What the broker said of one message; `Err` with why it counts as a failed attempt.
pub(crate) struct Confirmed {
    pub outcome: Result<(), String>,
    /// The channel should not be used again (it failed, or stopped confirming).
    pub channel_broken: bool,
}

/// Each publish's confirm in order, all waited for until `timeout` after the first wait:
/// once it passes, every confirm not in yet counts as missing.
pub(crate) async fn collect<F>(
    publishes: Vec<Result<F, lapin::Error>>,
    timeout: Duration,
) -> Vec<Confirmed>
where
    F: Future<Output = Result<Confirmation, lapin::Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut confirmed = Vec::with_capacity(publishes.len());
    for publish in publishes {
        let (outcome, channel_broken) = match publish {
            Ok(confirm) => match tokio::time::timeout_at(deadline, confirm).await {
                Ok(Ok(Confirmation::Ack(None))) => (Ok(()), false),
                Ok(Ok(Confirmation::Ack(Some(_)))) => (
                    Err("unroutable: no queue is bound for it".to_owned()),
                    false,
                ),
                // A channel keeps its own view of each quorum queue it publishes to; one
                // opened while a queue was electing a new leader (a node lost) went on
                // refusing everything for as long as the node stayed down. A fresh channel
                // looks the queue up again.
                Ok(Ok(Confirmation::Nack(_))) => {
                    (Err("the broker refused the message".to_owned()), true)
                }
                Ok(Ok(Confirmation::NotRequested)) => {
                    (Err("the channel does not confirm".to_owned()), false)
                }
                Ok(Err(e)) => (Err(e.to_string()), true),
                Err(_) => (Err("no confirm within the timeout".to_owned()), true),
            },
            Err(e) => (Err(e.to_string()), true),
        };
        confirmed.push(Confirmed {
            outcome,
            channel_broken,
        });
    }
    confirmed
}

#[cfg(test)]
mod tests {
    use super::*;

    type Confirm = std::pin::Pin<Box<dyn Future<Output = Result<Confirmation, lapin::Error>>>>;

    #[tokio::test(start_paused = true)]
    async fn confirms_that_never_come_cost_the_batch_one_timeout_not_one_each() {
        let timeout = Duration::from_secs(10);
        let never: Vec<Result<Confirm, lapin::Error>> = (0..50)
            .map(|_| Ok(Box::pin(std::future::pending()) as Confirm))
            .collect();
        let started = tokio::time::Instant::now();
        let confirmed = collect(never, timeout).await;
        // The clock is the test's own (paused): it moves only as far as the waits ask.
        assert_eq!(started.elapsed(), timeout);
        assert_eq!(confirmed.len(), 50);
        assert!(
            confirmed
                .iter()
                .all(|c| c.outcome.is_err() && c.channel_broken)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn confirms_in_before_the_deadline_count_and_the_rest_are_missing() {
        let timeout = Duration::from_secs(10);
        // A confirm resolves when the broker's ack arrives, whether or not it is awaited yet.
        let start = tokio::time::Instant::now();
        let after = |secs| {
            Ok(Box::pin(async move {
                tokio::time::sleep_until(start + Duration::from_secs(secs)).await;
                Ok(Confirmation::Ack(None))
            }) as Confirm)
        };
        let confirmed = collect(vec![after(3), after(9), after(11)], timeout).await;
        let acked: Vec<bool> = confirmed.iter().map(|c| c.outcome.is_ok()).collect();
        assert_eq!(acked, [true, true, false]);
    }
}
