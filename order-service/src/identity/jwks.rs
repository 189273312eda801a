//! The issuer's public keys, fetched from its JWKS endpoint (RFC 7517) and cached by key id.
//!
//! - A token naming a key the cache lacks fetches the set again (the issuer rotated its
//!   keys), at most once per [`JwksSettings::min_refresh`] whatever the tokens say: an
//!   attacker inventing key ids gets 401s, not a flood of fetches. One fetch runs at a time;
//!   requests that need it wait for it rather than fetching again.
//! - A set older than [`JwksSettings::max_age`] is fetched again when next used, by one
//!   request while the others go on with the keys they have; a failed fetch keeps them.
//! - Only RSA keys (RS256) and P-256 keys (ES256) meant for signatures are kept, each with the
//!   one algorithm it verifies: a token's `alg` must be accepted by the configuration and be
//!   its key's, so no token can choose how it is checked.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::settings::JwksSettings;

/// Larger answers are not a key set.
const MAX_BODY_BYTES: usize = 256 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A key of the set and the algorithm it verifies.
#[derive(Clone)]
pub struct Key {
    pub algorithm: Algorithm,
    pub decoding: Arc<DecodingKey>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Why no key could be found for a token.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// The set (fetched again if allowed) has no such key: the token is not ours.
    Unknown,
    /// The endpoint could not be read and no key is cached: nothing can be verified.
    Unavailable,
}

#[derive(Default)]
struct Snapshot {
    keys: HashMap<String, Key>,
    /// Keys without a `kid`, usable by tokens that name none when they are the only ones.
    unnamed: Vec<Key>,
    fetched_at: Option<Instant>,
}

/// The cache; cheap to share behind an `Arc`.
pub struct Jwks {
    settings: JwksSettings,
    client: reqwest::Client,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Held while fetching; also guards the time of the last attempt.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("url", &self.settings.url)
            .finish_non_exhaustive()
    }
}

impl Jwks {
    pub fn new(settings: JwksSettings) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .context("building the JWKS client")?;
        Ok(Self {
            settings,
            client,
            snapshot: RwLock::default(),
            fetching: tokio::sync::Mutex::new(None),
        })
    }

    /// The key `kid` names (or the only key, when the token names none).
    pub async fn key(&self, kid: Option<&str>) -> Result<Key, Missing> {
        let current = self.current();
        let stale = current
            .fetched_at
            .is_none_or(|at| at.elapsed() >= self.settings.max_age);
        match find(&current, kid) {
            Some(key) if !stale => return Ok(key),
            Some(key) => {
                // Someone else may be fetching already: then go on with the key in hand.
                if let Ok(mut last) = self.fetching.try_lock() {
                    self.refresh(&mut last).await;
                }
                return Ok(find(&self.current(), kid).unwrap_or(key));
            }
            None => {}
        }
        let mut last = self.fetching.lock().await;
        // The fetch this request waited for may have brought the key.
        if let Some(key) = find(&self.current(), kid) {
            return Ok(key);
        }
        self.refresh(&mut last).await;
        let current = self.current();
        match find(&current, kid) {
            Some(key) => Ok(key),
            None if current.fetched_at.is_none() => Err(Missing::Unavailable),
            None => Err(Missing::Unknown),
        }
    }

    fn current(&self) -> Arc<Snapshot> {
        // A poisoned lock still holds a whole snapshot: it is only ever swapped.
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Fetches the set unless the last attempt was too recent; keeps the old keys on failure.
    async fn refresh(&self, last_attempt: &mut Option<Instant>) {
        if last_attempt.is_some_and(|at| at.elapsed() < self.settings.min_refresh) {
            return;
        }
        *last_attempt = Some(Instant::now());
        match self.fetch().await {
            Ok(snapshot) => {
                *self
                    .snapshot
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
            }
            Err(error) => tracing::warn!(
                url = %self.settings.url,
                error = format!("{error:#}"),
                "could not fetch the JWKS; keeping the keys already held"
            ),
        }
    }

    async fn fetch(&self) -> anyhow::Result<Snapshot> {
        let response = self.client.get(&self.settings.url).send().await?;
        if !response.status().is_success() {
            bail!("the JWKS endpoint answered {}", response.status());
        }
        let body = response.bytes().await?;
        if body.len() > MAX_BODY_BYTES {
            bail!("the JWKS is {} bytes long, more than a key set", body.len());
        }
        let set: JwkSet = serde_json::from_slice(&body).context("the JWKS is not a key set")?;
        let mut snapshot = Snapshot {
            fetched_at: Some(Instant::now()),
            ..Snapshot::default()
        };
        for jwk in &set.keys {
            let Some(key) = usable(jwk) else { continue };
            match &jwk.common.key_id {
                Some(kid) => {
                    snapshot.keys.insert(kid.clone(), key);
                }
                None => snapshot.unnamed.push(key),
            }
        }
        tracing::info!(
            url = %self.settings.url,
            keys = snapshot.keys.len() + snapshot.unnamed.len(),
            "fetched the JWKS"
        );
        Ok(snapshot)
    }
}

fn find(snapshot: &Snapshot, kid: Option<&str>) -> Option<Key> {
    match kid {
        Some(kid) => snapshot.keys.get(kid).cloned(),
        // Without a kid only an unambiguous set will do.
        None => match (snapshot.keys.len(), snapshot.unnamed.as_slice()) {
            (0, [only]) => Some(only.clone()),
            (1, []) => snapshot.keys.values().next().cloned(),
            _ => None,
        },
    }
}

/// The key of `jwk` with its one algorithm, if it is a signature key this service accepts.
fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    let algorithm = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        _ => return None,
    };
    // A key that declares an algorithm is used with that one only.
    if let Some(declared) = jwk.common.key_algorithm
        && Algorithm::try_from(declared).ok() != Some(algorithm)
    {
        return None;
    }
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key {
        algorithm,
        decoding: Arc::new(decoding),
    })
}
