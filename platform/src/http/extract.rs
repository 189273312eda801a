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

mod document;
mod json;
mod wording;

pub use json::{parse, parse_document};

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
        check_query(&parts.uri)?;
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|rejection| Problem::validation(rejection.body_text()))
    }
}

/// Every decoded name and value of the query string must be free of control characters.
fn check_query(uri: &axum::http::Uri) -> Result<(), Problem> {
    if uri.query().is_none() {
        return Ok(());
    }
    let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|rejection| Problem::validation(rejection.body_text()))?;
    pairs.0.iter().try_for_each(|(name, value)| {
        shared::text::check("a query parameter name", name)
            .and_then(|()| shared::text::check(&format!("the query parameter {name:?}"), value))
            .map_err(Problem::validation)
    })
}

/// A header's value as text a handler may use: absent is `None`; bytes that are not visible
/// ASCII (which is all a header value can portably carry), or a control character such as
/// a tab, are a 422 naming the header.
pub fn header_text<'a>(
    headers: &'a axum::http::HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, Problem> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| Problem::validation(format!("the {name} header must be visible ASCII")))?;
    shared::text::check(&format!("the {name} header"), text).map_err(Problem::validation)?;
    Ok(Some(text))
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

    #[test]
    fn a_control_character_in_the_query_string_is_422() {
        for uri in [
            "/x?after=%00",
            "/x?status=dead%0A",
            "/x?a%09b=1",
            "/x?after=%7F",
        ] {
            let uri: axum::http::Uri = uri.parse().expect("uri");
            assert_eq!(check_query(&uri).map_err(|p| p.status), Err(422), "{uri}");
        }
        let fine: axum::http::Uri = "/x?after=abc&limit=5&name=caf%C3%A9".parse().expect("uri");
        assert!(check_query(&fine).is_ok());
    }
}
