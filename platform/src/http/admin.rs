//! Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time.
//! With no token configured every admin request is refused (there is no "open" mode).

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use subtle::ConstantTimeEq;

/// The configured admin token, if any.
#[derive(Clone, Default)]
pub struct AdminToken(Option<Arc<str>>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "AdminToken(set)"
        } else {
            "AdminToken(unset)"
        })
    }
}

impl AdminToken {
    pub fn new(token: Option<String>) -> Self {
        if token.is_none() {
            tracing::warn!("ADMIN_TOKEN is not set: every admin endpoint will answer 401");
        }
        Self(token.map(Arc::from))
    }

    /// Whether `presented` is the configured token. Lengths leak (they are not secret);
    /// contents are compared without early exit.
    pub fn accepts(&self, presented: &str) -> bool {
        self.0
            .as_deref()
            .is_some_and(|expected| bool::from(expected.as_bytes().ct_eq(presented.as_bytes())))
    }

    /// Whether `headers` carry `Authorization: Bearer <the token>`. For endpoints that need
    /// the token only in some configurations (answer [`unauthorized`] when not); others take
    /// [`AdminAuth`].
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .is_some_and(|presented| self.accepts(presented))
    }
}

/// Proof that the request carried the admin token; take it as a handler argument.
#[derive(Debug, Clone, Copy)]
pub struct AdminAuth;

impl<S> FromRequestParts<S> for AdminAuth
where
    AdminToken: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if AdminToken::from_ref(state).admits(&parts.headers) {
            Ok(AdminAuth)
        } else {
            Err(unauthorized())
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` value. RFC 9110 §11.1 makes the
/// scheme name case-insensitive, so `bearer` and `BEARER` work too.
pub fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// 401 `unauthorized` with the challenge RFC 9110 §15.5.2 requires of every 401.
pub fn unauthorized() -> Response {
    let mut response = Problem::unauthorized().into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(ADMIN_CHALLENGE));
    response
}

/// The challenge of the admin endpoints.
pub const ADMIN_CHALLENGE: &str = "Bearer realm=\"admin\"";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_token_is_accepted() {
        let token = AdminToken::new(Some("s3cret".into()));
        assert!(token.accepts("s3cret"));
        assert!(!token.accepts("s3cre"));
        assert!(!token.accepts("s3cretx"));
        assert!(!AdminToken::new(None).accepts(""));
    }

    #[test]
    fn the_bearer_scheme_is_matched_case_insensitively() {
        for value in ["Bearer t", "bearer t", "BEARER t", "bEaReR  t "] {
            assert_eq!(bearer_credentials(value), Some("t"), "{value}");
        }
        for value in ["Basic t", "Bearert", "t", "Bearer"] {
            assert_eq!(bearer_credentials(value), None, "{value}");
        }
    }
}
