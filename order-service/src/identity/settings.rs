//! End-user identity settings: `AUTH_JWT_SECRET` or `AUTH_JWKS_URL` (one, not both),
//! `AUTH_JWT_ISSUER`, `AUTH_JWT_AUDIENCE`. Neither key source set: identity is off.

use std::time::Duration;

use anyhow::bail;
use platform::config as env;

use crate::config::http_url;

/// RFC 7518 §3.2: an HS256 key must be at least as long as the hash, 256 bits.
const MIN_SECRET_BYTES: usize = 32;

/// How the service verifies end users' tokens.
#[derive(Debug, Clone, Default)]
pub struct IdentityConfig {
    /// Where verification keys come from; `None`: identity off, every caller anonymous.
    pub keys: Option<KeySource>,
    /// `AUTH_JWT_ISSUER`: when set, tokens must carry this `iss`.
    pub issuer: Option<String>,
    /// `AUTH_JWT_AUDIENCE`: when set, tokens must carry this `aud`.
    pub audience: Option<String>,
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
        if keys.is_none() {
            // A claim check configured without identity would silently check nothing.
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
        })
    }

    pub fn is_on(&self) -> bool {
        self.keys.is_some()
    }
}
