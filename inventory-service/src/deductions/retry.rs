//! The retry policy of `POST /deductions`: which failures are lost races, and how long to
//! keep trying before answering 503 `busy`.

use std::time::{Duration, Instant};

use super::error::DeductionError;
use crate::stock::lock::LockError;

/// Why one attempt did not finish.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Refused(#[from] DeductionError),
}

impl From<sqlx::Error> for AttemptError {
    fn from(error: sqlx::Error) -> Self {
        Self::Refused(error.into())
    }
}

impl AttemptError {
    /// A lost race: the attempt changed nothing and another one may well succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Lock(LockError::Lost) => true,
            // PostgreSQL undid the write because of another writer: a deadlock, a product
            // that moved since it was read, or an id of the batch recorded meanwhile.
            Self::Refused(DeductionError::Database(error)) => {
                platform::messaging::consumer::is_database_contention(error)
            }
            _ => false,
        }
    }
}

impl From<AttemptError> for DeductionError {
    fn from(error: AttemptError) -> Self {
        match error {
            AttemptError::Lock(LockError::Timeout(waited)) => Self::Busy(format!(
                "the stock is locked by other deductions (waited {waited:?}); retry shortly"
            )),
            AttemptError::Lock(LockError::Lost) => Self::Busy(
                "the stock lock kept being lost under this deduction; retry shortly".to_owned(),
            ),
            AttemptError::Refused(DeductionError::Database(error))
                if platform::messaging::consumer::is_database_contention(&error) =>
            {
                Self::Busy("other writers kept getting in the way; retry shortly".to_owned())
            }
            AttemptError::Refused(error) => error,
        }
    }
}

/// Bounded retries with jittered exponential backoff, for attempts that lost a race.
#[derive(Debug)]
pub struct Retry {
    attempts: u32,
    deadline: Instant,
}

impl Retry {
    /// Attempts at most, counting the first.
    pub const MAX_ATTEMPTS: u32 = 10;
    const BASE: Duration = Duration::from_millis(5);
    const CAP: Duration = Duration::from_millis(200);

    /// Retries until `budget` has passed or [`Retry::MAX_ATTEMPTS`] were made.
    pub fn new(budget: Duration) -> Self {
        Self {
            attempts: 1,
            deadline: Instant::now() + budget,
        }
    }

    /// Waits before the next attempt; `false` when the budget is spent (then give up).
    pub async fn pause(&mut self) -> bool {
        let now = Instant::now();
        if self.attempts >= Self::MAX_ATTEMPTS || now >= self.deadline {
            return false;
        }
        let pause = platform::retry::backoff(self.attempts, Self::BASE, Self::CAP);
        self.attempts += 1;
        tokio::time::sleep(pause.min(self.deadline - now)).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retries_stop_when_the_budget_is_spent() {
        let mut retry = Retry::new(Duration::from_secs(60));
        let mut pauses = 0;
        while retry.pause().await {
            pauses += 1;
        }
        assert_eq!(pauses, Retry::MAX_ATTEMPTS - 1);
        assert!(!Retry::new(Duration::ZERO).pause().await);
    }

    #[test]
    fn only_lost_races_are_retried() {
        assert!(AttemptError::Lock(LockError::Lost).is_retryable());
        assert!(!AttemptError::Lock(LockError::Timeout(Duration::from_secs(1))).is_retryable());
        assert!(!AttemptError::Refused(DeductionError::Reused).is_retryable());
    }
}
