//! Turns SIGINT/SIGTERM into a cancelled [`CancellationToken`] that every loop watches, after
//! an optional drain (`SHUTDOWN_DRAIN_SECS`) in which only readiness says the service is going.
//!
//! The drain exists for load balancers that learn from readiness probes (a Kubernetes Service):
//! a pod that stopped accepting the moment it got SIGTERM would refuse the requests still routed
//! to it until its endpoint is removed. Answering `/readyz` 503 first, while everything else
//! keeps serving and consuming, lets the routing catch up before the graceful shutdown starts.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest drain accepted. Endpoints follow a failed probe within seconds; a value of
/// minutes is most likely milliseconds written as seconds, and would hold every rollout.
pub const MAX_DRAIN_SECS: u64 = 300;

/// `SHUTDOWN_DRAIN_SECS`: how long `/readyz` answers 503 after a shutdown signal before the
/// graceful shutdown runs. Default 0 (shut down at once), at most [`MAX_DRAIN_SECS`].
pub fn drain_from_env() -> anyhow::Result<Duration> {
    crate::config::within("SHUTDOWN_DRAIN_SECS", 0, 0..=MAX_DRAIN_SECS).map(Duration::from_secs)
}

/// A token cancelled when the service should stop serving.
///
/// On the first SIGINT or SIGTERM `draining` is cancelled at once (readiness then answers 503)
/// and the returned token `drain` later; in between the service works as before. A second
/// signal ends the drain early, so an operator's second Ctrl-C is not kept waiting.
/// The signal handlers are installed before this returns: a signal from then on is never
/// taken by the default action, which would kill the process without a graceful shutdown.
pub fn on_signal(drain: Duration, draining: CancellationToken) -> CancellationToken {
    let (signals, received) = mpsc::unbounded_channel();
    listen(signals);
    let stop = CancellationToken::new();
    tokio::spawn(drain_then_stop(received, drain, draining, stop.clone()));
    stop
}

/// The shutdown sequence, fed by the names of the signals received.
async fn drain_then_stop(
    mut signals: mpsc::UnboundedReceiver<&'static str>,
    drain: Duration,
    draining: CancellationToken,
    stop: CancellationToken,
) {
    let Some(signal) = signals.recv().await else {
        return;
    };
    draining.cancel();
    if !drain.is_zero() {
        tracing::info!(
            signal,
            drain_secs = drain.as_secs(),
            "shutdown signal received; /readyz answers 503 while the service goes on serving"
        );
        tokio::select! {
            () = tokio::time::sleep(drain) => {}
            Some(again) = signals.recv() => {
                tracing::info!(signal = again, "second shutdown signal; drain cut short");
            }
        }
    }
    tracing::info!(signal, "shutting down; draining");
    stop.cancel();
}

/// Forwards every SIGINT and SIGTERM to `signals` for as long as someone listens.
#[cfg(unix)]
fn listen(signals: mpsc::UnboundedSender<&'static str>) {
    use tokio::signal::unix::{Signal, SignalKind, signal};

    let register = |kind: SignalKind, name: &'static str| -> Option<Signal> {
        signal(kind)
            .inspect_err(|error| tracing::error!(%error, "cannot listen for {name}"))
            .ok()
    };
    let (interrupt, terminate) = (
        register(SignalKind::interrupt(), "SIGINT"),
        register(SignalKind::terminate(), "SIGTERM"),
    );
    for (mut listener, name) in [(interrupt, "SIGINT"), (terminate, "SIGTERM")]
        .into_iter()
        .filter_map(|(listener, name)| Some((listener?, name)))
    {
        let signals = signals.clone();
        tokio::spawn(async move {
            while listener.recv().await.is_some() {
                if signals.send(name).is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(not(unix))]
fn listen(signals: mpsc::UnboundedSender<&'static str>) {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if signals.send("Ctrl-C").is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the sequence with `drain`; returns its signal sender and the two tokens.
    fn sequence(
        drain: Duration,
    ) -> (
        mpsc::UnboundedSender<&'static str>,
        CancellationToken,
        CancellationToken,
    ) {
        let (signals, received) = mpsc::unbounded_channel();
        let (draining, stop) = (CancellationToken::new(), CancellationToken::new());
        tokio::spawn(drain_then_stop(
            received,
            drain,
            draining.clone(),
            stop.clone(),
        ));
        (signals, draining, stop)
    }

    // The clock is paused: it moves only when every task waits on a timer, so the virtual time
    // that passed between the signal and the stop is exactly the drain the code waited.

    #[tokio::test(start_paused = true)]
    async fn without_a_drain_the_service_stops_at_the_signal() {
        let (signals, draining, stop) = sequence(Duration::ZERO);
        let start = tokio::time::Instant::now();
        signals.send("SIGTERM").expect("the sequence listens");
        stop.cancelled().await;
        assert!(draining.is_cancelled());
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_goes_first_and_the_stop_follows_after_the_drain() {
        let drain = Duration::from_secs(5);
        let (signals, draining, stop) = sequence(drain);
        let start = tokio::time::Instant::now();
        signals.send("SIGTERM").expect("the sequence listens");
        draining.cancelled().await;
        assert!(!stop.is_cancelled(), "stopped before the drain");
        stop.cancelled().await;
        assert_eq!(start.elapsed(), drain);
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_signal_cuts_the_drain_short() {
        let (signals, draining, stop) = sequence(Duration::from_secs(MAX_DRAIN_SECS));
        let start = tokio::time::Instant::now();
        signals.send("SIGTERM").expect("the sequence listens");
        draining.cancelled().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!stop.is_cancelled(), "stopped before the second signal");
        signals.send("SIGINT").expect("the sequence listens");
        stop.cancelled().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_stops_before_a_signal() {
        let (_signals, draining, stop) = sequence(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!draining.is_cancelled());
        assert!(!stop.is_cancelled());
    }
}
