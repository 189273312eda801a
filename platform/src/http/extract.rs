//! Extractors whose rejections are problem+json, so clients never see axum's plain-text errors.
//!
//! `Json` reads the body whatever its `Content-Type` says (the API only speaks JSON, and being
//! strict there would only turn `curl -d` typos into confusing 415s) and tells apart
//! syntactically broken JSON (400 `malformed-json`) from well-formed but invalid input
//! (422 `validation-failed`), as the contract asks.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use shared::Problem;

/// A JSON body. Also usable as a response (serialises with `application/json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                payload_too_large()
            } else {
                Problem::malformed_json(rejection.body_text())
            }
        })?;
        parse(&bytes).map(Json)
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// Parses a JSON document, classifying the failure the way the API reports it.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => Problem::validation(e.to_string()),
        _ if bytes.iter().all(u8::is_ascii_whitespace) => {
            Problem::malformed_json("the request body is empty; a JSON document is required")
        }
        _ => Problem::malformed_json(e.to_string()),
    })
}

pub fn payload_too_large() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Payload too large",
        format!(
            "request bodies are limited to {} KiB",
            super::BODY_LIMIT_BYTES / 1024
        ),
    )
}

/// Query parameters; a value of the wrong type is a 422.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|rejection| Problem::validation(rejection.body_text()))
    }
}

/// Path parameters; a segment that cannot name a resource (say, `/orders/banana`) is a 404,
/// because no resource lives at that path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|_| Problem::not_found(format!("nothing exists at {}", parts.uri.path())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        n: u8,
    }

    #[test]
    fn broken_json_is_400_and_invalid_json_is_422() {
        let cases: &[(&str, u16)] = &[
            ("{", 400),
            ("", 400),
            ("{\"n\": 1,}", 400),
            ("not json", 400),
            ("{\"n\": 300}", 422),
            ("{\"n\": \"1\"}", 422),
            ("{\"n\": 1, \"status\": \"CONFIRMED\"}", 422),
            ("[]", 422),
            ("null", 422),
        ];
        for (body, status) in cases {
            let problem = parse::<Body>(body.as_bytes()).expect_err(body);
            assert_eq!(problem.status, *status, "{body}");
        }
        assert!(parse::<Body>(b"{\"n\": 1}").is_ok());
    }
}
