//! Why a deduction got no answer of its own: the use case's error, which only the routes
//! turn into problem+json (`crate::error`).

/// Why a deduction was not answered with its stored response.
#[derive(Debug, thiserror::Error)]
pub enum DeductionError {
    /// The deduction id was used before with other items: 422 `idempotency-key-reused`.
    #[error("this deduction_id was already used with different items")]
    Reused,
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
