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
    #[error("order {0} was rejected; there is nothing to cancel")]
    NotCancellable(OrderId),
    #[error("a dependency is unavailable: {0}")]
    Unavailable(&'static str),
    #[error(transparent)]
    Problem(#[from] Problem),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
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
            Self::Problem(problem) => problem.clone(),
            Self::Database(_) | Self::Unexpected(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        if problem.status >= 500 {
            tracing::error!(error = ?self, "request failed");
        }
        let mut response = problem.into_response();
        if matches!(self, Self::RequestInProgress | Self::Unavailable(_)) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
