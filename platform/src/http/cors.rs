//! Cross-origin access for browser clients (`CORS_ALLOWED_ORIGINS`): which origins may call the
//! API from a page, with what. Unset, no CORS header is sent and browsers keep pages of other
//! origins out, as before.
//!
//! Preflights (`OPTIONS` with `Access-Control-Request-Method`) are answered by this layer
//! before routing, so they need no credentials (a browser never sends any on a preflight).
//! Credentials mode stays off: callers authenticate with an `Authorization` header the page
//! sets itself, never with cookies, so no origin can ride on a user's ambient session.

use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::config;

/// How long a browser may cache a preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The origins allowed to call the API from a browser; empty: CORS off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cors {
    origins: Vec<HeaderValue>,
}

impl Cors {
    /// `CORS_ALLOWED_ORIGINS`: comma-separated origins such as `https://shop.example`
    /// (scheme, host and optional port; no path). Unset or empty: off.
    pub fn from_env() -> anyhow::Result<Self> {
        const NAME: &str = "CORS_ALLOWED_ORIGINS";
        let Some(raw) = config::optional(NAME) else {
            return Ok(Self::default());
        };
        Self::parse(&raw)
            .with_context(|| format!("environment variable {NAME}={raw:?} is not valid"))
    }

    /// Parses a comma-separated list of origins.
    pub fn parse(raw: &str) -> anyhow::Result<Self> {
        let origins = raw
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(origin)
            .collect::<anyhow::Result<Vec<_>>>()?;
        if origins.is_empty() {
            bail!("no origin given");
        }
        Ok(Self { origins })
    }

    pub fn is_on(&self) -> bool {
        !self.origins.is_empty()
    }

    /// The layer answering preflights and marking responses for the allowed origins, or
    /// `None` when CORS is off.
    pub fn layer(&self) -> Option<CorsLayer> {
        self.is_on().then(|| {
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(self.origins.iter().cloned()))
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([
                    header::AUTHORIZATION,
                    HeaderName::from_static("idempotency-key"),
                    header::CONTENT_TYPE,
                ])
                .expose_headers([
                    header::LOCATION,
                    HeaderName::from_static("idempotent-replayed"),
                    header::RETRY_AFTER,
                    HeaderName::from_static("x-request-id"),
                ])
                .max_age(PREFLIGHT_MAX_AGE)
        })
    }
}

/// One origin as browsers send it in `Origin`: `scheme://host[:port]`, nothing after.
fn origin(raw: &str) -> anyhow::Result<HeaderValue> {
    let (scheme, rest) = raw
        .split_once("://")
        .with_context(|| format!("{raw:?} is not an origin like https://shop.example"))?;
    if !matches!(scheme, "http" | "https") {
        bail!("{raw:?}: the scheme must be http or https");
    }
    let host_is_plain = !rest.is_empty()
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !host_is_plain {
        bail!("{raw:?}: an origin is a scheme, a host and an optional port, with no path");
    }
    HeaderValue::from_str(raw).with_context(|| format!("{raw:?} is not a header value"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_parsed_and_anything_else_is_refused() {
        let cors = Cors::parse(" https://shop.example , http://localhost:3000").expect("valid");
        assert_eq!(
            cors.origins,
            ["https://shop.example", "http://localhost:3000"]
        );
        assert!(cors.is_on() && cors.layer().is_some());
        for bad in [
            "",
            " , ",
            "shop.example",
            "ftp://shop.example",
            "https://shop.example/",
            "https://shop.example/path",
            "https://",
            "*",
        ] {
            assert!(Cors::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Cors::default().layer().is_none());
    }
}
