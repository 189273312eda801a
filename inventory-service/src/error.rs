//! `ApiError`: every way a request can fail, turned into problem+json at the HTTP edge.
//! 5xx causes are logged once here and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use shared::ids::ProductId;

use crate::deductions::DeductionError;
use crate::input::Invalid;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Well-formed input that breaks a rule: 422 `validation-failed`.
    #[error("{0}")]
    Validation(#[from] Invalid),
    /// 404 `not-found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `product-exists`.
    #[error("product {0} already exists")]
    ProductExists(ProductId),
    /// An idempotency key or deduction id repeated with a different request: 422
    /// `idempotency-key-reused`.
    #[error("{0}")]
    KeyReused(String),
    /// The work lost too many races (locks busy, rows changing, pool exhausted): 503 `busy`
    /// with `Retry-After`; the request changed nothing and can be sent again.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Database(sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
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

/// A deduction's refusals as the API words them.
impl From<DeductionError> for ApiError {
    fn from(error: DeductionError) -> Self {
        match error {
            DeductionError::Reused => Self::KeyReused(error.to_string()),
            DeductionError::Busy(detail) => Self::Busy(detail),
            DeductionError::Database(error) => Self::Database(error),
            DeductionError::Unexpected(error) => Self::Unexpected(error),
        }
    }
}

impl ApiError {
    fn problem(&self) -> Problem {
        match self {
            Self::Validation(invalid) => Problem::validation(invalid.to_string()),
            Self::NotFound(detail) => Problem::not_found(detail.clone()),
            Self::ProductExists(_) => Problem::new(
                StatusCode::CONFLICT,
                "product-exists",
                "Product exists",
                self.to_string(),
            ),
            Self::KeyReused(detail) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused",
                detail.clone(),
            ),
            Self::Busy(detail) => Problem::busy(detail.clone()),
            Self::Database(_) | Self::Unexpected(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Database(_) | Self::Unexpected(_) => {
                tracing::error!(error = ?self, "request failed");
            }
            Self::Busy(detail) => tracing::warn!(detail, "request refused as busy"),
            _ => {}
        }
        let busy = matches!(self, Self::Busy(_));
        let mut response = self.problem().into_response();
        if busy {
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
    fn server_errors_say_nothing_about_their_cause() {
        let error = ApiError::Database(sqlx::Error::Protocol("secret table t_x".into()));
        let problem = error.problem();
        assert_eq!(problem.status, 500);
        assert!(!problem.detail.contains("secret"));
    }

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
    fn a_taken_product_id_is_a_409_product_exists() {
        let problem = ApiError::ProductExists(ProductId(7)).problem();
        assert_eq!((problem.status, problem.slug()), (409, "product-exists"));
    }
}
