//! Why a deduction got no answer of its own: the use case's error, which only the routes
//! turn into problem+json (`crate::error`).

/// Why a deduction was not answered with its stored response.
#[derive(Debug, thiserror::Error)]
pub enum DeductionError {
    /// The id was used before with another body: 422 `idempotency-key-reused`.
    #[error("this id was already used with a different body")]
    Reused,
    /// A hold's try that came after its cancel: 409 `hold-cancelled`, nothing held.
    #[error("this hold was cancelled before it was tried; nothing was held")]
    HoldCancelled,
    /// It lost too many races (locks busy, rows changing, pool exhausted); nothing changed.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<sqlx::Error> for DeductionError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            // Every connection busy for the whole acquire timeout: overload, not a bug.
            sqlx::Error::PoolTimedOut => {
                Self::Busy("the database is busy; retry shortly".to_owned())
            }
            other => Self::Database(other),
        }
    }
}
