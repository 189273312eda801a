//! Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time.
//! With no token configured every admin request is refused (there is no "open" mode).

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
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
}

/// Proof that the request carried the admin token; take it as a handler argument.
#[derive(Debug, Clone, Copy)]
pub struct AdminAuth;

impl<S> FromRequestParts<S> for AdminAuth
where
    AdminToken: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let token = AdminToken::from_ref(state);
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match presented {
            Some(p) if token.accepts(p) => Ok(AdminAuth),
            _ => Err(Problem::unauthorized()),
        }
    }
}

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
}
