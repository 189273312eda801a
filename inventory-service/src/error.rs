//! `ApiError`: every way a request can fail, turned into problem+json at the HTTP edge.
//! 5xx causes are logged once here and never sent to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use platform::http::DatabaseError;
use shared::Problem;
use shared::ids::ProductId;

use crate::deductions::DeductionError;
use crate::holds::error::HoldError;
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
    /// The request cannot apply in the resource's present state: 409 with this slug.
    #[error("{detail}")]
    Conflict {
        slug: &'static str,
        title: &'static str,
        detail: String,
    },
    /// The work lost too many races (locks busy, rows changing, pool exhausted): 503 `busy`
    /// with `Retry-After`; the request changed nothing and can be sent again.
    #[error("{0}")]
    Busy(String),
    /// A pool exhausted before the work began, or any other database error.
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

/// A deduction's refusals as the API words them.
impl From<DeductionError> for ApiError {
    fn from(error: DeductionError) -> Self {
        match error {
            DeductionError::Reused => Self::KeyReused(error.to_string()),
            DeductionError::HoldCancelled => Self::Conflict {
                slug: "hold-cancelled",
                title: "Hold cancelled",
                detail: error.to_string(),
            },
            DeductionError::Busy(detail) => Self::Busy(detail),
            DeductionError::Database(error) => Self::Database(DatabaseError::Failed(error)),
            DeductionError::Unexpected(error) => Self::Unexpected(error),
        }
    }
}

/// A hold's refusals as the API words them.
impl From<HoldError> for ApiError {
    fn from(error: HoldError) -> Self {
        let conflict = |slug, title, error: &HoldError| Self::Conflict {
            slug,
            title,
            detail: error.to_string(),
        };
        match error {
            HoldError::NotFound(_) => Self::NotFound(error.to_string()),
            HoldError::Expired(..) => conflict("hold-expired", "Hold expired", &error),
            HoldError::Cancelled(_) => conflict("hold-cancelled", "Hold cancelled", &error),
            HoldError::Confirmed(_) => conflict("hold-confirmed", "Hold confirmed", &error),
            HoldError::Busy(detail) => Self::Busy(detail),
            HoldError::Database(error) => error.into(),
            HoldError::Unexpected(error) => Self::Unexpected(error),
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
            Self::Conflict {
                slug,
                title,
                detail,
            } => Problem::new(StatusCode::CONFLICT, slug, title, detail.clone()),
            Self::Busy(detail) => Problem::busy(detail.clone()),
            Self::Database(error) => error.problem(),
            Self::Unexpected(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Database(error) = self {
            return error.into_response();
        }
        match &self {
            Self::Unexpected(_) => tracing::error!(error = ?self, "request failed"),
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
    fn a_taken_product_id_is_a_409_product_exists() {
        let problem = ApiError::ProductExists(ProductId(7)).problem();
        assert_eq!((problem.status, problem.slug()), (409, "product-exists"));
    }
}
