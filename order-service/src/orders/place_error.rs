//! Why an order was not placed: the use case's own error, which only the routes turn into
//! problem+json (`crate::error`).

/// Why an order was not placed; the routes turn it into problem+json.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The body is not a JSON object (or not JSON at all).
    #[error(transparent)]
    Malformed(#[from] shared::Problem),
    #[error("{0}")]
    Invalid(String),
    #[error("the Idempotency-Key header is missing")]
    MissingIdempotencyKey,
    #[error("the idempotency key was never issued or has expired")]
    UnknownIdempotencyKey,
    #[error("the idempotency key was used for a different request")]
    IdempotencyKeyReused,
    #[error("a request with this idempotency key is still in progress")]
    RequestInProgress,
    #[error("this idempotency token was taken by another user")]
    TokenOfAnotherUser,
    /// The caller is known, and the order names another user.
    #[error("{0}")]
    Forbidden(String),
    #[error("a dependency is unavailable: {0}")]
    Unavailable(&'static str),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl PlaceError {
    /// One request's share of its failed intake batch's `error` (`None`: the batch left it
    /// unanswered, a bug). `sqlx::Error` is not `Clone`; a pool timeout carries nothing and
    /// is made again for each request, so `POST /orders` answers an exhausted pool as every
    /// endpoint does (503 `busy`, `Retry-After`); any other error becomes its message (500).
    pub(crate) fn of_batch(error: Option<&sqlx::Error>) -> Self {
        match error {
            Some(sqlx::Error::PoolTimedOut) => Self::Database(sqlx::Error::PoolTimedOut),
            Some(error) => {
                Self::Unexpected(anyhow::anyhow!("placing a batch of orders failed: {error}"))
            }
            None => Self::Unexpected(anyhow::anyhow!(
                "placing a batch of orders left a request unanswered"
            )),
        }
    }
}
