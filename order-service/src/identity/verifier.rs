//! Verifies a bearer JWT and names its user.
//!
//! The accepted algorithms come from the configuration alone: HS256 with `AUTH_JWT_SECRET`,
//! RS256 and ES256 (each only with a key of its own kind) with `AUTH_JWKS_URL`. A token asking
//! for anything else (`none`, HS256 against public keys, …) is refused before any key is
//! touched. `exp` is required, `exp` and `nbf` are checked with `AUTH_JWT_LEEWAY_SECS` of leeway
//! for clock skew (5 s by default), and a configured issuer or audience must be present and
//! match.

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use shared::ids::UserId;

use super::jwks::{Jwks, Missing};
use super::settings::{IdentityConfig, KeySource};

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request carried no bearer credentials at all.
    Missing,
    /// The credentials are not a valid token for this service; the text says why.
    Invalid(&'static str),
    /// The keys to check it with cannot be had right now.
    KeysUnavailable,
}

enum Keys {
    Secret(DecodingKey),
    Jwks(Jwks),
}

/// Checks tokens against the configured keys and claims.
pub struct Verifier {
    keys: Keys,
    /// The claim rules; its `algorithms` is set per token to the one its key verifies.
    rules: Validation,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

/// The claims read here; the signature and the time and audience rules cover the rest.
#[derive(Deserialize)]
struct Claims {
    sub: Option<serde_json::Value>,
}

impl Verifier {
    /// `None` when identity is off.
    pub fn from_config(config: &IdentityConfig) -> anyhow::Result<Option<Arc<Self>>> {
        let Some(source) = &config.keys else {
            return Ok(None);
        };
        let keys = match source {
            KeySource::Secret(secret) => Keys::Secret(DecodingKey::from_secret(secret)?),
            KeySource::Jwks(settings) => Keys::Jwks(Jwks::new(settings.clone())?),
        };
        let mut rules = Validation::new(Algorithm::HS256);
        rules.leeway = config.leeway_secs;
        rules.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(issuer) = &config.issuer {
            rules.set_issuer(&[issuer]);
            required.push("iss");
        }
        match &config.audience {
            Some(audience) => {
                rules.set_audience(&[audience]);
                required.push("aud");
            }
            // Tokens minted for several services carry an `aud`; with none configured here
            // it is not ours to judge.
            None => rules.validate_aud = false,
        }
        rules.set_required_spec_claims(&required);
        Ok(Some(Arc::new(Self { keys, rules })))
    }

    /// The user an `Authorization` header value proves, if it does.
    pub async fn verify(&self, authorization: Option<&str>) -> Result<UserId, Refusal> {
        let token = authorization
            .and_then(platform::http::admin::bearer_credentials)
            .ok_or(Refusal::Missing)?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::Invalid("the token is not a well-formed JWT"))?;
        let (algorithm, key) = match &self.keys {
            Keys::Secret(secret) => {
                if header.alg != Algorithm::HS256 {
                    return Err(Refusal::Invalid("the token's algorithm is not accepted"));
                }
                (Algorithm::HS256, KeyRef::Borrowed(secret))
            }
            Keys::Jwks(jwks) => {
                if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
                    return Err(Refusal::Invalid("the token's algorithm is not accepted"));
                }
                let key = jwks.key(header.kid.as_deref()).await.map_err(|m| match m {
                    Missing::Unknown => Refusal::Invalid("the token's signing key is not known"),
                    Missing::Unavailable => Refusal::KeysUnavailable,
                })?;
                if key.algorithm != header.alg {
                    return Err(Refusal::Invalid(
                        "the token's algorithm is not its key's algorithm",
                    ));
                }
                (key.algorithm, KeyRef::Shared(key.decoding))
            }
        };
        let mut rules = self.rules.clone();
        rules.algorithms = vec![algorithm];
        let claims = jsonwebtoken::decode::<Claims>(token, key.get(), &rules)
            .map_err(|e| Refusal::Invalid(reason(e.kind())))?
            .claims;
        user_id(claims.sub.as_ref())
    }
}

enum KeyRef<'a> {
    Borrowed(&'a DecodingKey),
    Shared(Arc<DecodingKey>),
}

impl KeyRef<'_> {
    fn get(&self) -> &DecodingKey {
        match self {
            Self::Borrowed(key) => key,
            Self::Shared(key) => key,
        }
    }
}

/// `sub` must be a string holding a positive 64-bit integer, written plainly.
fn user_id(sub: Option<&serde_json::Value>) -> Result<UserId, Refusal> {
    const NOT_A_USER: Refusal = Refusal::Invalid("the token's sub is not a user id");
    let sub = sub.and_then(serde_json::Value::as_str).ok_or(NOT_A_USER)?;
    let plain = sub.bytes().all(|b| b.is_ascii_digit()) && !sub.starts_with('0');
    match sub.parse::<i64>() {
        Ok(id) if plain && id > 0 => Ok(UserId(id)),
        _ => Err(NOT_A_USER),
    }
}

/// What a client may be told about a refused token: enough to fix its own mistake.
fn reason(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet",
        ErrorKind::InvalidIssuer => "the token's issuer is not accepted",
        ErrorKind::InvalidAudience => "the token's audience is not accepted",
        ErrorKind::MissingRequiredClaim(_) => "the token lacks a required claim",
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted",
        _ => "the token is not valid",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_plain_positive_integer_string_is_a_user() {
        assert_eq!(user_id(Some(&json!("42"))), Ok(UserId(42)));
        for bad in [
            json!(42),
            json!("0"),
            json!("-1"),
            json!("+1"),
            json!("007"),
            json!("1.0"),
            json!(" 1"),
            json!("abc"),
            json!(""),
            json!("9223372036854775808"),
            json!(null),
        ] {
            assert!(user_id(Some(&bad)).is_err(), "{bad}");
        }
        assert!(user_id(None).is_err());
    }
}
