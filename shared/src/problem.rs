//! The RFC 9457 problem+json body every error of both services is written as.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem. `type` is `/problems/<slug>`; the slug is what clients branch on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "type": "/problems/validation-failed",
    "title": "Request validation failed",
    "status": 422,
    "detail": "quantity must be between 1 and 1000000"
}))]
pub struct Problem {
    /// URI reference naming the kind of problem: `/problems/<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind of problem; the same for every occurrence.
    pub title: String,
    /// The HTTP status code, repeated for clients that only see the body.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
}

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("/problems/{slug}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
        }
    }

    /// The slug at the end of `type`.
    pub fn slug(&self) -> &str {
        self.kind.rsplit('/').next().unwrap_or_default()
    }

    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn malformed_json(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "Malformed JSON",
            detail,
        )
    }

    pub fn validation(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
            "Request validation failed",
            detail,
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            "a valid `Authorization: Bearer <ADMIN_TOKEN>` header is required",
        )
    }

    /// 503 `busy`: the service is overloaded (locks, database connections); the request
    /// changed nothing and may be sent again after `Retry-After`.
    pub fn busy(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", "Busy", detail)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal server error",
            "the request could not be completed; it has been logged",
        )
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.title, self.status, self.detail)
    }
}

impl std::error::Error for Problem {}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let mut response = (status, axum::Json(self)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_with_type_first_class() {
        let problem = Problem::validation("bad");
        let json = serde_json::to_value(&problem).unwrap_or_default();
        assert_eq!(json["type"], "/problems/validation-failed");
        assert_eq!(json["status"], 422);
        assert_eq!(problem.slug(), "validation-failed");
    }
}
