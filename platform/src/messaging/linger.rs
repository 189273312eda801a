//! How long a batch waits for company: scaled to the pace items arrive at, taken only when
//! company is likely.
//!
//! The relay and the consumers batch whatever has arrived when they look. At a moderate rate
//! (hundreds of orders a second on two cores) that is one or two messages, and each of them
//! pays a whole statement, a commit and a broker round trip of its own: at 261 orders/s the
//! build with a fixed 2 ms wait spent three times the CPU per order it spent at saturation.
//! Waiting longer fills the batches, but a fixed long wait delays every order by the whole
//! wait at every stage, even when the batch would have gone out full anyway or nothing else
//! was coming.
//!
//! So each stage keeps its [`Pace`]: the mean gap between arrivals, learned from its own
//! batches. A batch whose first item is in hand then waits
//! - not at all when the stage is idle, or items come further apart than [`Linger::wait`]
//!   (nothing is likely to join within the longest wait: an order on a quiet system is never
//!   delayed);
//! - else until [`Linger::ENOUGH`] items are in hand, or for the time that many arrivals take
//!   at the pace seen, at most [`Linger::wait`] from the first item.
//!
//! At a steady moderate rate a batch waits the longest wait and carries several items; at a
//! high rate it fills within a millisecond or two and goes, so the last order of a burst waits
//! for a short while, not for the whole wait; at saturation the batch is full before anyone
//! looks and nothing waits.
//!
//! None of this is on the path of `POST /orders`, whose intake never waits (see
//! `order_service::orders::intake`); the wait delays only the settlement of an order, by at most
//! [`Linger::wait`] per stage.

use std::time::Duration;

use tokio::time::Instant;

/// `BATCH_LINGER_MS` when unset.
pub const DEFAULT_WAIT_MS: u64 = 10;

/// The longest a batch waits for company. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linger {
    /// The longest wait, counted from the first item of the batch. Zero: never wait.
    pub wait: Duration,
}

impl Linger {
    /// A batch this large goes at once: beyond it the statement, commit and round trip an
    /// item saves are a small share of what the item costs anyway.
    pub const ENOUGH: usize = 8;

    pub const fn new(wait: Duration) -> Self {
        Self { wait }
    }

    /// Until when a batch whose first item came at `first`, and that holds `have` items now,
    /// waits for more; `None`: go now.
    pub fn deadline(&self, pace: &Pace, have: usize, first: Instant) -> Option<Instant> {
        if have >= Self::ENOUGH || self.wait.is_zero() {
            return None;
        }
        let busy = pace
            .last_start
            .is_some_and(|last| first.saturating_duration_since(last) < self.idle_after());
        let gap = pace.gap.filter(|gap| busy && *gap < self.wait)?;
        let company = gap.saturating_mul((Self::ENOUGH - 1) as u32);
        Some(first + company.min(self.wait))
    }

    /// A stage whose last batch started longer ago than this is idle: what it learned of the
    /// pace is stale.
    fn idle_after(&self) -> Duration {
        (self.wait * 20).max(Duration::from_millis(100))
    }
}

impl Default for Linger {
    fn default() -> Self {
        Self::new(Duration::from_millis(DEFAULT_WAIT_MS))
    }
}

/// What a stage has learned of the pace its items arrive at, from its own batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pace {
    /// When the previous batch started.
    last_start: Option<Instant>,
    /// Mean gap between arrivals (a moving average over recent batches); `None` until a stage
    /// that was idle has seen two batches close together.
    gap: Option<Duration>,
}

impl Pace {
    /// Weight of the newest batch in the moving average (1 in 4): a few batches follow a
    /// change of rate, one odd batch does not.
    const NEWEST_IN: u32 = 4;

    /// Records a batch of `items` that starts at `now`: they arrived since the previous batch
    /// started.
    pub fn record(&mut self, items: usize, now: Instant, linger: &Linger) {
        let since = self
            .last_start
            .map(|last| now.saturating_duration_since(last));
        self.last_start = Some(now);
        let Some(since) = since.filter(|since| *since < linger.idle_after()) else {
            self.gap = None;
            return;
        };
        let sample = since / u32::try_from(items.max(1)).unwrap_or(u32::MAX);
        self.gap = Some(match self.gap {
            None => sample,
            Some(gap) => (gap * (Self::NEWEST_IN - 1) + sample) / Self::NEWEST_IN,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A pace learned from batches of `items` starting every `every`.
    fn steady(items: usize, every: Duration, batches: u32, start: Instant) -> Pace {
        let linger = Linger::new(WAIT);
        let mut pace = Pace::default();
        for n in 0..batches {
            pace.record(items, start + every * n, &linger);
        }
        pace
    }

    #[test]
    fn an_idle_stage_goes_at_once() {
        let now = Instant::now();
        let linger = Linger::new(WAIT);
        assert_eq!(linger.deadline(&Pace::default(), 1, now), None);
        let mut pace = steady(1, ms(4), 10, now);
        let later = now + ms(40) + linger.idle_after();
        assert_eq!(linger.deadline(&pace, 1, later), None);
        // A batch after a long silence teaches nothing about the pace.
        pace.record(1, later, &linger);
        assert_eq!(linger.deadline(&pace, 1, later), None);
    }

    #[test]
    fn items_further_apart_than_the_wait_do_not_wait() {
        let now = Instant::now();
        let pace = steady(1, ms(25), 10, now);
        assert_eq!(Linger::new(WAIT).deadline(&pace, 1, now), None);
    }

    #[test]
    fn a_moderate_steady_rate_waits_the_longest_wait() {
        let now = Instant::now();
        // 261 orders a second: one every 3.8 ms.
        let pace = steady(1, Duration::from_micros(3_830), 20, now);
        assert_eq!(Linger::new(WAIT).deadline(&pace, 1, now), Some(now + WAIT));
    }

    #[test]
    fn a_high_rate_waits_only_as_long_as_enough_items_take() {
        let now = Instant::now();
        // 2,000 a second, in batches of 4 every 2 ms: a gap of 0.5 ms.
        let pace = steady(4, ms(2), 20, now);
        let deadline = Linger::new(WAIT).deadline(&pace, 1, now).expect("waits");
        assert_eq!(deadline - now, Duration::from_micros(500) * 7);
    }

    #[test]
    fn a_batch_with_enough_items_goes_at_once() {
        let now = Instant::now();
        let pace = steady(1, ms(2), 20, now);
        assert_eq!(Linger::new(WAIT).deadline(&pace, Linger::ENOUGH, now), None);
    }

    #[test]
    fn the_pace_follows_a_change_of_rate_within_a_few_batches() {
        let now = Instant::now();
        let linger = Linger::new(WAIT);
        let mut pace = steady(1, ms(2), 20, now);
        let mut at = now + ms(40);
        for _ in 0..12 {
            at += ms(30);
            pace.record(1, at, &linger);
        }
        assert_eq!(linger.deadline(&pace, 1, at), None);
    }

    #[test]
    fn no_wait_configured_means_none() {
        let now = Instant::now();
        let pace = steady(1, ms(2), 20, now);
        assert_eq!(Linger::new(Duration::ZERO).deadline(&pace, 1, now), None);
    }
}
