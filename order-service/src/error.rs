//! `ApiError`: every way a request can fail, and how each becomes problem+json.
//! 5xx causes are logged once here and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use platform::http::DatabaseError;
use shared::Problem;
use shared::ids::OrderId;

use crate::orders::payment::confirm::ConfirmRefused;
use crate::orders::place_error::PlaceError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("order {0} not found")]
    OrderNotFound(OrderId),
    #[error("{0}")]
    Validation(String),
    /// The caller is known, and this is not theirs to ask for.
    #[error("{0}")]
    Forbidden(String),
    /// `POST /orders` refused to place an order.
    #[error(transparent)]
    Place(PlaceError),
    #[error("order {0} was rejected; there is nothing to cancel")]
    NotCancellable(OrderId),
    /// `POST /orders/{order_id}/confirm` refused (its database errors join the others).
    #[error(transparent)]
    Confirm(ConfirmRefused),
    #[error("a dependency is unavailable: {0}")]
    Unavailable(&'static str),
    #[error(transparent)]
    Problem(#[from] Problem),
    /// A pool exhausted (503 `busy`, the request changed nothing) or any other database error.
    #[error(transparent)]
    Database(DatabaseError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error.into())
    }
}

impl From<ConfirmRefused> for ApiError {
    fn from(refused: ConfirmRefused) -> Self {
        match refused {
            ConfirmRefused::NotFound(order_id) => Self::OrderNotFound(order_id),
            ConfirmRefused::Database(error) => error.into(),
            refused => Self::Confirm(refused),
        }
    }
}

/// Each refusal of `POST /orders` as the API words it: the database's and the unexpected
/// ones join the service's own, the rest keep their use-case meaning.
impl From<PlaceError> for ApiError {
    fn from(error: PlaceError) -> Self {
        match error {
            PlaceError::Malformed(problem) => Self::Problem(problem),
            PlaceError::Invalid(detail) => Self::Validation(detail),
            PlaceError::Unavailable(what) => Self::Unavailable(what),
            PlaceError::Forbidden(detail) => Self::Forbidden(detail),
            PlaceError::Database(error) => error.into(),
            PlaceError::Unexpected(error) => Self::Unexpected(error),
            refused => Self::Place(refused),
        }
    }
}

impl ApiError {
    fn problem(&self) -> Problem {
        use StatusCode as S;
        match self {
            Self::OrderNotFound(_) => Problem::not_found(self.to_string()),
            Self::Validation(detail) => Problem::validation(detail.clone()),
            Self::Place(refused) => place_problem(refused),
            Self::Forbidden(detail) => {
                Problem::new(S::FORBIDDEN, "forbidden", "Forbidden", detail.clone())
            }
            Self::NotCancellable(_) => Problem::new(
                S::CONFLICT,
                "order-not-cancellable",
                "Order cannot be cancelled",
                self.to_string(),
            ),
            Self::Confirm(refused) => confirm_problem(refused),
            Self::Unavailable(what) => Problem::new(
                S::SERVICE_UNAVAILABLE,
                "not-ready",
                "Service unavailable",
                format!("{what} is unreachable; retry later"),
            ),
            Self::Problem(problem) => problem.clone(),
            Self::Database(error) => error.problem(),
            Self::Unexpected(_) => Problem::internal(),
        }
    }
}

/// A refusal of a confirm (the variants [`ApiError::from`] keeps as they are).
fn confirm_problem(refused: &ConfirmRefused) -> Problem {
    let detail = refused.to_string();
    match refused {
        ConfirmRefused::WindowClosed { .. } => Problem::new(
            StatusCode::CONFLICT,
            "payment-window-closed",
            "Payment window closed",
            detail,
        ),
        ConfirmRefused::NotYetReserved(_) | ConfirmRefused::NotAwaiting { .. } => Problem::new(
            StatusCode::CONFLICT,
            "not-awaiting-payment",
            "Order not awaiting payment",
            detail,
        ),
        // Turned into the service's own errors by `ApiError::from`.
        ConfirmRefused::NotFound(_) => Problem::not_found(detail),
        ConfirmRefused::Database(_) => Problem::internal(),
    }
}

/// A refusal of `POST /orders` (the variants [`ApiError::from`] keeps as they are).
fn place_problem(refused: &PlaceError) -> Problem {
    use StatusCode as S;
    match refused {
        PlaceError::MissingIdempotencyKey => Problem::new(
            S::BAD_REQUEST,
            "missing-idempotency-key",
            "Missing idempotency key",
            "send `Idempotency-Key: <token>` with a token from POST /idempotency-tokens",
        ),
        PlaceError::UnknownIdempotencyKey => Problem::new(
            S::BAD_REQUEST,
            "unknown-idempotency-key",
            "Unknown idempotency key",
            "the token was never issued, or it expired unused; get a new one from POST /idempotency-tokens",
        ),
        PlaceError::IdempotencyKeyReused => Problem::new(
            S::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
            "Idempotency key reused",
            "this token was already used with a different request body",
        ),
        PlaceError::RequestInProgress => Problem::new(
            S::CONFLICT,
            "request-in-progress",
            "Request in progress",
            "the first request with this token has not finished; retry after a moment",
        ),
        PlaceError::TokenOfAnotherUser | PlaceError::Forbidden(_) => {
            Problem::new(S::FORBIDDEN, "forbidden", "Forbidden", refused.to_string())
        }
        // Turned into the service's own errors by `ApiError::from`.
        PlaceError::Malformed(problem) => problem.clone(),
        PlaceError::Invalid(detail) => Problem::validation(detail.clone()),
        PlaceError::Unavailable(_) | PlaceError::Database(_) | PlaceError::Unexpected(_) => {
            Problem::internal()
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Database(error) = self {
            return error.into_response();
        }
        let problem = self.problem();
        if problem.status >= 500 {
            tracing::error!(error = ?self, "request failed");
        }
        let mut response = problem.into_response();
        if matches!(
            self,
            Self::Place(PlaceError::RequestInProgress)
                | Self::Unavailable(_)
                // Inventory answers within a moment; then the order waits for this confirm.
                | Self::Confirm(ConfirmRefused::NotYetReserved(_))
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
