//! `ApiError`: every way a request can fail, and how each becomes problem+json.
//! 5xx causes are logged once here and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use shared::ids::OrderId;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("order {0} not found")]
    OrderNotFound(OrderId),
    #[error("{0}")]
    Validation(String),
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
    /// The caller is known, and this is not theirs to ask for.
    #[error("{0}")]
    Forbidden(String),
    #[error("order {0} was rejected; there is nothing to cancel")]
    NotCancellable(OrderId),
    #[error("a dependency is unavailable: {0}")]
    Unavailable(&'static str),
    /// Every database connection stayed busy for the whole acquire timeout: overload, not a
    /// bug. 503 `busy` with `Retry-After`; the request changed nothing.
    #[error("the database is busy; retry shortly")]
    Busy,
    #[error(transparent)]
    Problem(#[from] Problem),
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::PoolTimedOut => Self::Busy,
            other => Self::Database(other),
        }
    }
}

impl ApiError {
    fn problem(&self) -> Problem {
        use StatusCode as S;
        match self {
            Self::OrderNotFound(_) => Problem::not_found(self.to_string()),
            Self::Validation(detail) => Problem::validation(detail.clone()),
            Self::MissingIdempotencyKey => Problem::new(
                S::BAD_REQUEST,
                "missing-idempotency-key",
                "Missing idempotency key",
                "send `Idempotency-Key: <token>` with a token from POST /idempotency-tokens",
            ),
            Self::UnknownIdempotencyKey => Problem::new(
                S::BAD_REQUEST,
                "unknown-idempotency-key",
                "Unknown idempotency key",
                "the token was never issued, or it expired unused; get a new one from POST /idempotency-tokens",
            ),
            Self::IdempotencyKeyReused => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused",
                "this token was already used with a different request body",
            ),
            Self::RequestInProgress => Problem::new(
                S::CONFLICT,
                "request-in-progress",
                "Request in progress",
                "the first request with this token has not finished; retry after a moment",
            ),
            Self::TokenOfAnotherUser | Self::Forbidden(_) => {
                Problem::new(S::FORBIDDEN, "forbidden", "Forbidden", self.to_string())
            }
            Self::NotCancellable(_) => Problem::new(
                S::CONFLICT,
                "order-not-cancellable",
                "Order cannot be cancelled",
                self.to_string(),
            ),
            Self::Unavailable(what) => Problem::new(
                S::SERVICE_UNAVAILABLE,
                "not-ready",
                "Service unavailable",
                format!("{what} is unreachable; retry later"),
            ),
            Self::Busy => Problem::busy(self.to_string()),
            Self::Problem(problem) => problem.clone(),
            Self::Database(_) | Self::Unexpected(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        match self {
            Self::Busy => tracing::warn!("request refused as busy: the database pool is exhausted"),
            _ if problem.status >= 500 => tracing::error!(error = ?self, "request failed"),
            _ => {}
        }
        let mut response = problem.into_response();
        if matches!(
            self,
            Self::RequestInProgress | Self::Unavailable(_) | Self::Busy
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_timeout_is_a_busy_503_with_retry_after() {
        let response = ApiError::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(HeaderValue::as_bytes),
            Some(&b"1"[..])
        );
    }

    #[test]
    fn other_database_errors_stay_500_and_say_nothing() {
        let problem = ApiError::from(sqlx::Error::Protocol("secret table t_x".into())).problem();
        assert_eq!(problem.status, 500);
        assert!(!problem.detail.contains("secret"));
    }
}
