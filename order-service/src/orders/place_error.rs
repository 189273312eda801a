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
