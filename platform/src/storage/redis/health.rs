//! Whether Redis is down, known once per process and shared by every caller.
//!
//! A Redis that stops answering (a stopped process, a dead network path) does not refuse
//! connections: every call waits out the response timeout. Paying that once per call would
//! stall everything that talks to Redis, so after **one** call fails that way Redis counts
//! as down and callers skip it at once ([`RedisHealth::call`] answers
//! [`RedisCallError::Down`] without sending anything). A background check
//! ([`RedisHealth::watch`]) pings it every period and declares it up again on the first
//! answer.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::storage::redis::RedisConnection;
use redis::RedisError;
use tokio_util::sync::CancellationToken;

/// How often [`RedisHealth::watch`] pings.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why a call guarded by [`RedisHealth::call`] did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// Redis is known to be down; nothing was sent.
    #[error("Redis is down")]
    Down,
    /// The call was sent and failed (if Redis did not answer, it now counts as down).
    #[error(transparent)]
    Failed(#[from] RedisError),
}

/// Shared up/down state of one Redis. Cheap to clone; starts up.
#[derive(Clone, Default)]
pub struct RedisHealth {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    down: AtomicBool,
    /// Times Redis went from up to down, for logs and tests.
    outages: AtomicU64,
}

impl std::fmt::Debug for RedisHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHealth")
            .field("down", &self.is_down())
            .field("outages", &self.outages())
            .finish()
    }
}

impl RedisHealth {
    pub fn is_down(&self) -> bool {
        self.inner.down.load(Ordering::Relaxed)
    }

    /// How many times Redis was found down since start.
    pub fn outages(&self) -> u64 {
        self.inner.outages.load(Ordering::Relaxed)
    }

    /// Notes a failed call; an error saying Redis did not answer marks it down. Returns
    /// whether it was such an error (an error *reply* means Redis answered: still up).
    pub fn record_failure(&self, error: &RedisError) -> bool {
        let unreachable = is_unreachable(error);
        if unreachable {
            self.mark_down(error);
        }
        unreachable
    }

    /// Runs `call`, unless Redis is down: then answers [`RedisCallError::Down`] at once
    /// without running it. A call that finds its connection broken (a Redis that restarted,
    /// a reset socket) runs once more on the fresh connection the manager opens; only its
    /// second failure counts. `call` must therefore be safe to run twice: a repeat that the
    /// first run already did, or a script that recognises its own earlier run.
    pub async fn call<T, F, Fut>(&self, mut call: F) -> Result<T, RedisCallError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if self.is_down() {
            return Err(RedisCallError::Down);
        }
        let result = match call().await {
            Err(error) if is_broken_connection(&error) => {
                tracing::debug!(%error, "a Redis connection broke; calling again on a new one");
                call().await
            }
            result => result,
        };
        result.map_err(|error| {
            self.record_failure(&error);
            RedisCallError::Failed(error)
        })
    }

    fn mark_down(&self, error: &RedisError) {
        if !self.inner.down.swap(true, Ordering::Relaxed) {
            self.inner.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                %error,
                "Redis did not answer: it counts as down until a health check gets a PONG"
            );
        }
    }

    fn mark_up(&self) {
        if self.inner.down.swap(false, Ordering::Relaxed) {
            tracing::info!("Redis answers again");
        }
    }

    /// Pings through `conn` every `every` until `shutdown`: an answer marks Redis up, a
    /// failure that means it did not answer marks it down (so an outage is noticed even
    /// while nothing else calls Redis).
    pub async fn watch(
        self,
        mut conn: RedisConnection,
        every: Duration,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let ping = async {
                let first = conn.ping().await;
                match first {
                    // As in `call`: a broken connection is not an outage yet.
                    Err(error) if is_broken_connection(&error) => conn.ping().await,
                    answered => answered,
                }
            };
            let pinged = tokio::select! {
                () = shutdown.cancelled() => return,
                pinged = ping => pinged,
            };
            match pinged {
                Ok(_) => self.mark_up(),
                Err(error) => {
                    self.record_failure(&error);
                }
            }
        }
    }
}

/// Whether `error` says the connection itself broke (reset, closed, a broken pipe) rather
/// than Redis not answering on it (a timeout) or refusing a new one: the connection manager
/// then reconnects, and the next call goes over the new connection.
fn is_broken_connection(error: &RedisError) -> bool {
    error.is_connection_dropped() && !error.is_connection_refusal() && !error.is_timeout()
}

/// Whether `error` says Redis did not answer (timed out, refused, dropped, any I/O failure)
/// rather than answered with an error.
pub fn is_unreachable(error: &RedisError) -> bool {
    error.is_timeout()
        || error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> RedisError {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply").into()
    }

    #[tokio::test]
    async fn one_timeout_marks_redis_down_and_later_calls_are_not_run() {
        let health = RedisHealth::default();
        let first: Result<(), _> = health.call(|| async { Err(timed_out()) }).await;
        assert!(matches!(first, Err(RedisCallError::Failed(_))));
        assert!(health.is_down());
        let mut ran = false;
        let second: Result<(), _> = health
            .call(|| {
                ran = true;
                async { Ok(()) }
            })
            .await;
        assert!(matches!(second, Err(RedisCallError::Down)));
        assert!(!ran, "a call while Redis is down is never started");
        assert_eq!(health.outages(), 1);
        health.mark_up();
        assert!(!health.is_down());
    }

    #[tokio::test]
    async fn an_error_reply_leaves_redis_up() {
        let health = RedisHealth::default();
        let reply = RedisError::from((redis::ErrorKind::Client, "WRONGTYPE"));
        let failed: Result<(), _> = health.call(|| async { Err(reply.clone()) }).await;
        assert!(matches!(failed, Err(RedisCallError::Failed(_))));
        assert!(!health.is_down());
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        std::io::Error::new(kind, "the socket says so").into()
    }

    /// Runs `health.call` with a call failing with `errors` in turn, then succeeding;
    /// answers the result and how many times the call ran.
    async fn calls_failing_with(
        health: &RedisHealth,
        errors: Vec<RedisError>,
    ) -> (Result<(), RedisCallError>, usize) {
        let mut errors = errors.into_iter();
        let mut runs = 0;
        let result = health
            .call(|| {
                runs += 1;
                let next = errors.next();
                async move { next.map_or(Ok(()), Err) }
            })
            .await;
        (result, runs)
    }

    #[tokio::test]
    async fn a_broken_connection_is_called_again_once_before_redis_counts_as_down() {
        use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
        let health = RedisHealth::default();
        let (result, runs) = calls_failing_with(&health, vec![io(BrokenPipe)]).await;
        assert!(result.is_ok());
        assert_eq!((runs, health.is_down()), (2, false));

        let (result, runs) =
            calls_failing_with(&health, vec![io(ConnectionReset), io(BrokenPipe)]).await;
        assert!(matches!(result, Err(RedisCallError::Failed(_))));
        assert_eq!(
            (runs, health.is_down()),
            (2, true),
            "a second break is an outage"
        );
    }

    #[tokio::test]
    async fn a_timeout_or_a_refused_connection_is_not_called_again() {
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        for error in [timed_out(), refused] {
            let health = RedisHealth::default();
            let (result, runs) = calls_failing_with(&health, vec![error]).await;
            assert!(matches!(result, Err(RedisCallError::Failed(_))));
            assert_eq!((runs, health.is_down()), (1, true));
        }
    }
}
