//! End-user identity (docs/contract.md §3.3): who is calling, from a bearer JWT, when configured.
//!
//! Handlers of the protected operations take [`Caller`] as their first argument, so the token
//! is checked before the path, the query or the body is looked at: a request that does not
//! authenticate gets its 401 whatever else is wrong with it. With identity off every caller
//! is anonymous (`Caller(None)`) and nothing changes.

pub mod jwks;
pub mod settings;
pub mod verifier;

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::Problem;
use shared::ids::UserId;

pub use settings::IdentityConfig;
pub use verifier::{Refusal, Verifier};

/// The verifier when identity is on.
#[derive(Debug, Clone, Default)]
pub struct Identity(Option<Arc<Verifier>>);

impl Identity {
    pub fn from_config(config: &IdentityConfig) -> anyhow::Result<Self> {
        Verifier::from_config(config).map(Self)
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }
}

/// Who sent the request: the token's user, or nobody in particular with identity off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller(pub Option<UserId>);

/// Any state that holds the [`Identity`] (the service's, a test's router) extracts a caller.
impl<S> FromRequestParts<S> for Caller
where
    S: Send + Sync,
    Identity: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Identity(verifier) = Identity::from_ref(state);
        let Some(verifier) = verifier else {
            return Ok(Self(None));
        };
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or_default());
        match verifier.verify(authorization).await {
            Ok(user) => Ok(Self(Some(user))),
            Err(refusal) => Err(refusal.into_response()),
        }
    }
}

impl IntoResponse for Refusal {
    /// RFC 6750 §3: a request without credentials gets the bare challenge; one whose token
    /// does not hold gets `error="invalid_token"`. Keys that cannot be fetched are the
    /// service's trouble, not the client's: 503.
    fn into_response(self) -> Response {
        let (detail, challenge) = match self {
            Self::Missing => (
                "send `Authorization: Bearer <jwt>` with a token from the identity provider",
                HeaderValue::from_static("Bearer"),
            ),
            Self::Invalid(why) => (
                why,
                HeaderValue::from_str(&format!(
                    "Bearer error=\"invalid_token\", error_description=\"{why}\""
                ))
                .unwrap_or(HeaderValue::from_static("Bearer error=\"invalid_token\"")),
            ),
            Self::KeysUnavailable => {
                tracing::warn!("a token could not be checked: no key could be fetched");
                return Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not-ready",
                    "Service unavailable",
                    "the identity provider's keys cannot be fetched; retry later",
                )
                .into_response();
            }
        };
        let mut response = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
        response
    }
}
