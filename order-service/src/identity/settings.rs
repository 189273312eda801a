//! End-user identity settings: `AUTH_JWT_SECRET` or `AUTH_JWKS_URL` (one, not both),
//! `AUTH_JWT_ISSUER`, `AUTH_JWT_AUDIENCE`, `AUTH_JWT_LEEWAY_SECS`. Neither key source set:
//! identity is off.

use std::time::Duration;

use anyhow::bail;
use platform::config as env;

use crate::config::url::http_url;

/// RFC 7518 §3.2: an HS256 key must be at least as long as the hash, 256 bits.
const MIN_SECRET_BYTES: usize = 32;

/// Seconds of clock skew tolerated on `exp` and `nbf` by default: more than the skew of
/// clocks kept by NTP, little enough that a token is refused within seconds of its `exp`.
pub const DEFAULT_LEEWAY_SECS: u64 = 5;

/// The most leeway `AUTH_JWT_LEEWAY_SECS` may grant (RFC 7519 §4.1.4: "no more than a few
/// minutes").
const MAX_LEEWAY_SECS: u64 = 300;

/// How the service verifies end users' tokens.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// Where verification keys come from; `None`: identity off, every caller anonymous.
    pub keys: Option<KeySource>,
    /// `AUTH_JWT_ISSUER`: when set, tokens must carry this `iss`.
    pub issuer: Option<String>,
    /// `AUTH_JWT_AUDIENCE`: when set, tokens must carry this `aud`.
    pub audience: Option<String>,
    /// `AUTH_JWT_LEEWAY_SECS`: clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            keys: None,
            issuer: None,
            audience: None,
            leeway_secs: DEFAULT_LEEWAY_SECS,
        }
    }
}

#[derive(Clone)]
pub enum KeySource {
    /// `AUTH_JWT_SECRET`: HS256 with a secret shared with the issuer.
    Secret(Vec<u8>),
    /// `AUTH_JWKS_URL`: RS256 or ES256 with the issuer's public keys.
    Jwks(JwksSettings),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Secret(_) => f.write_str("Secret(..)"),
            Self::Jwks(settings) => f.debug_tuple("Jwks").field(settings).finish(),
        }
    }
}

/// Where the keys are and how often they may be fetched again.
#[derive(Debug, Clone)]
pub struct JwksSettings {
    pub url: String,
    /// A token naming a key the cache does not hold fetches the set again, but not sooner
    /// than this after the last fetch: made-up key ids cannot turn into a flood of fetches.
    pub min_refresh: Duration,
    /// Keys older than this are fetched again when next used, so a key the issuer withdrew
    /// stops being accepted; while the endpoint is down the old ones are kept.
    pub max_age: Duration,
}

impl JwksSettings {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            min_refresh: Duration::from_secs(10),
            max_age: Duration::from_secs(300),
        }
    }
}

impl IdentityConfig {
    pub fn from_env() -> anyhow::Result<Self> {
        let secret = env::optional("AUTH_JWT_SECRET");
        let jwks = env::optional("AUTH_JWKS_URL");
        let keys = match (secret, jwks) {
            (Some(_), Some(_)) => bail!(
                "environment variables AUTH_JWT_SECRET and AUTH_JWKS_URL are both set: \
                 tokens are verified with one or the other, set only one"
            ),
            (Some(secret), None) if secret.len() < MIN_SECRET_BYTES => bail!(
                "environment variable AUTH_JWT_SECRET is out of range: it must be at least \
                 {MIN_SECRET_BYTES} bytes long"
            ),
            (Some(secret), None) => Some(KeySource::Secret(secret.into_bytes())),
            // A URL that cannot be fetched would refuse every user.
            (None, Some(url)) => Some(KeySource::Jwks(JwksSettings::new(http_url(
                "AUTH_JWKS_URL",
                &url,
            )?))),
            (None, None) => None,
        };
        let issuer = env::optional("AUTH_JWT_ISSUER");
        let audience = env::optional("AUTH_JWT_AUDIENCE");
        let leeway_secs = env::within(
            "AUTH_JWT_LEEWAY_SECS",
            DEFAULT_LEEWAY_SECS,
            0..=MAX_LEEWAY_SECS,
        )?;
        if keys.is_none() {
            // A claim check configured without identity would silently check nothing. The
            // leeway is no check of its own, so a shared configuration may carry it either way.
            for (name, value) in [
                ("AUTH_JWT_ISSUER", &issuer),
                ("AUTH_JWT_AUDIENCE", &audience),
            ] {
                if value.is_some() {
                    bail!(
                        "environment variable {name} is set but identity is off: set \
                         AUTH_JWT_SECRET or AUTH_JWKS_URL too"
                    );
                }
            }
        }
        Ok(Self {
            keys,
            issuer,
            audience,
            leeway_secs,
        })
    }

    pub fn is_on(&self) -> bool {
        self.keys.is_some()
    }
}
