//! A response kept in PostgreSQL so that a repeated request (same deduction id, same
//! restock idempotency key) gets the first answer again, byte for byte.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Set on a response that repeats a stored one.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A response as stored: status and exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// `true` when this repeats a stored response rather than answering for the first time.
    pub replayed: bool,
}

impl StoredResponse {
    /// The first answer to a request.
    pub fn first(status: StatusCode, body: Vec<u8>) -> Self {
        Self {
            status,
            body,
            replayed: false,
        }
    }

    /// A stored answer, sent again.
    pub fn again(status: StatusCode, body: Vec<u8>) -> Self {
        Self {
            status,
            body,
            replayed: true,
        }
    }
}

impl IntoResponse for StoredResponse {
    fn into_response(self) -> Response {
        let content_type = if self.status.is_success() {
            "application/json"
        } else {
            shared::problem::CONTENT_TYPE
        };
        let mut response = (self.status, self.body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if self.replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_problem_keeps_its_status_type_and_says_it_is_a_replay() {
        let response = StoredResponse::again(StatusCode::CONFLICT, b"{}".to_vec()).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_TYPE], shared::problem::CONTENT_TYPE);
        assert_eq!(headers[IDEMPOTENT_REPLAYED], "true");
        let first = StoredResponse::first(StatusCode::OK, b"{}".to_vec()).into_response();
        assert_eq!(first.headers()[header::CONTENT_TYPE], "application/json");
        assert!(!first.headers().contains_key(IDEMPOTENT_REPLAYED));
    }
}
