//! Keeps each of the consumer's channels subscribed on its own (docs/contract.md §4.4): a
//! channel whose subscription ends while the service runs (the broker closed the channel or
//! cancelled its consumer, or the connection died) is replaced after a short backoff, on the
//! current connection or on the next one the broker supervisor makes, while the other
//! channels go on consuming.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::channel::{self, Ended};
use super::{CONSUMER_CHANNELS_REPLACED_TOTAL, ConsumerSettings, ConsumerStore, Handler};
use crate::messaging::broker::Broker;
use crate::retry::backoff;

/// The first pause before a channel is opened again; it doubles (with jitter) up to the cap
/// while channels keep ending or subscribing keeps failing, so a broker that closes every
/// new channel at once is not hammered.
const RETRY_BASE: Duration = Duration::from_millis(100);
const RETRY_CAP: Duration = Duration::from_secs(5);
/// A subscription that lasted this long was healthy: the backoff starts over after it.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);

/// Channel `n` of the consumer, subscribed again whenever its subscription ends, until
/// `shutdown`.
pub(super) async fn keep_subscribed<H: Handler, S: ConsumerStore>(
    broker: &Broker,
    n: usize,
    settings: &ConsumerSettings,
    handler: &H,
    db: &S,
    shutdown: &CancellationToken,
) {
    let mut failures = 0u32;
    // The connection the previous subscription of this channel was lost on, while one is
    // being replaced; kept weak so a dead connection is not held through an outage.
    let mut lost_on: Option<Weak<lapin::Connection>> = None;
    while !shutdown.is_cancelled() {
        let Some(conn) = broker.connection(shutdown).await else {
            return;
        };
        let subscription = match channel::subscribe(&conn, n, settings).await {
            Ok(subscription) => subscription,
            Err(error) => {
                tracing::warn!(%error, queue = settings.queue, channel = n, "cannot subscribe; retrying");
                pause(&mut failures, shutdown).await;
                continue;
            }
        };
        if let Some(lost_on) = lost_on.take() {
            let same_connection = Weak::ptr_eq(&lost_on, &Arc::downgrade(&conn));
            tracing::info!(
                queue = settings.queue,
                channel = n,
                same_connection,
                "consumer channel replaced"
            );
            metrics::counter!(CONSUMER_CHANNELS_REPLACED_TOTAL).increment(1);
        }
        let started = Instant::now();
        let ended = channel::consume(subscription, n, settings, handler, db, shutdown).await;
        let Ended::Lost(error) = ended else {
            return;
        };
        if shutdown.is_cancelled() {
            return;
        }
        if started.elapsed() >= HEALTHY_AFTER {
            failures = 0;
        }
        let error = error.map(|error| error.to_string());
        tracing::warn!(
            queue = settings.queue,
            channel = n,
            error = error.as_deref(),
            "consumer channel lost; replacing it"
        );
        lost_on = Some(Arc::downgrade(&conn));
        drop(conn);
        pause(&mut failures, shutdown).await;
    }
}

/// Waits out the backoff for the `failures`-th retry in a row (or until `shutdown`), and
/// counts this one.
async fn pause(failures: &mut u32, shutdown: &CancellationToken) {
    let delay = backoff(*failures, RETRY_BASE, RETRY_CAP);
    *failures = failures.saturating_add(1);
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(delay) => {}
    }
}
