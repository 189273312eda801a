//! Retry pacing shared by every loop that waits before trying again.

use std::time::Duration;

/// Exponential backoff with full jitter: a random delay in `[base, min(cap, base * 2^attempt)]`.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    use rand::Rng;
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.min(20)))
        .min(cap)
        .max(base);
    let millis = rand::rng().random_range(base.as_millis()..=ceiling.as_millis());
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_its_bounds() {
        for attempt in 0..30 {
            let d = backoff(attempt, Duration::from_millis(100), Duration::from_secs(5));
            assert!(
                d >= Duration::from_millis(100) && d <= Duration::from_secs(5),
                "{d:?}"
            );
        }
    }
}
