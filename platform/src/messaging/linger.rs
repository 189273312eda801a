//! A short wait for a batch to fill, taken only while work arrives steadily.
//!
//! The relay and the consumers batch whatever has arrived when they look. At a moderate rate
//! (hundreds of orders a second on two cores) that is one or two messages, and each of them
//! queues behind the commits and broker round trips of the others. A stage that handled a
//! batch moments ago is likely to receive more within a few milliseconds, so it waits that
//! long and handles them together. A stage that has been idle goes at once: an order placed
//! on a quiet system is not delayed, and the wait never grows with load.
//!
//! None of this is on the path of `POST /orders`, whose intake never waits (see
//! `order_service::intake`); the wait delays only the settlement of an order, by at most
//! [`Linger::wait`] per stage.

use std::time::Duration;

use tokio::time::Instant;

/// `BATCH_LINGER_MS` when unset.
pub const DEFAULT_WAIT_MS: u64 = 2;

/// How long a busy stage waits for its batch to fill. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// The longest wait, counted from the first item of the batch. Zero: never wait.
    pub wait: Duration,
}

impl Linger {
    /// A stage counts as busy while its previous batch started less than this many waits ago.
    const BUSY_WAITS: u32 = 10;

    pub const fn new(wait: Duration) -> Self {
        Self { wait }
    }

    /// The wait to take before a batch whose first item is in hand, given when the previous
    /// batch started: [`Linger::wait`] if that was recent, else none.
    pub fn before_batch(&self, previous_start: Option<Instant>, now: Instant) -> Duration {
        let busy = previous_start.is_some_and(|start| {
            now.saturating_duration_since(start) < self.wait * Self::BUSY_WAITS
        });
        if busy { self.wait } else { Duration::ZERO }
    }
}

impl Default for Linger {
    fn default() -> Self {
        Self::new(Duration::from_millis(DEFAULT_WAIT_MS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(2);

    #[test]
    fn an_idle_stage_goes_at_once() {
        let now = Instant::now();
        let linger = Linger::new(WAIT);
        assert_eq!(linger.before_batch(None, now), Duration::ZERO);
        assert_eq!(
            linger.before_batch(Some(now - WAIT * 10), now),
            Duration::ZERO
        );
        assert_eq!(
            linger.before_batch(Some(now - Duration::from_secs(5)), now),
            Duration::ZERO
        );
    }

    #[test]
    fn a_stage_that_just_ran_a_batch_waits() {
        let now = Instant::now();
        let linger = Linger::new(WAIT);
        assert_eq!(linger.before_batch(Some(now), now), WAIT);
        assert_eq!(linger.before_batch(Some(now - WAIT * 9), now), WAIT);
    }

    #[test]
    fn no_wait_configured_means_none() {
        let now = Instant::now();
        let linger = Linger::new(Duration::ZERO);
        assert_eq!(linger.before_batch(Some(now), now), Duration::ZERO);
    }
}
