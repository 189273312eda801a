//! RS256 and ES256 tokens checked against the issuer's JWKS, served here by a small HTTP
//! server the test controls: key rotation, withdrawn keys, made-up key ids, algorithm
//! confusion and an endpoint that does not answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use order_service::identity::IdentityConfig;
use order_service::identity::settings::{JwksSettings, KeySource};
use serde_json::Value;

use super::{As, EC_P256, RSA_A, RSA_A_PUBLIC, RSA_B, assert_unauthorized, claims, hmac_key, sign};
use crate::helpers::{TestApp, assert_problem};

/// A signing key of the issuer, named by `kid`.
struct IssuerKey {
    kid: &'static str,
    algorithm: Algorithm,
    key: EncodingKey,
}

impl IssuerKey {
    fn rsa(kid: &'static str, pem: &[u8]) -> Self {
        let key = EncodingKey::from_rsa_pem(pem).expect("an RSA key");
        Self {
            kid,
            algorithm: Algorithm::RS256,
            key,
        }
    }

    fn ec(kid: &'static str, pem: &[u8]) -> Self {
        let key = EncodingKey::from_ec_pem(pem).expect("an EC key");
        Self {
            kid,
            algorithm: Algorithm::ES256,
            key,
        }
    }

    fn public(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.key, self.algorithm).expect("a public JWK");
        jwk.common.key_id = Some(self.kid.into());
        jwk
    }

    /// A valid token of `user` signed with this key.
    fn token(&self, user: &str) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.into());
        sign(header, &claims(user), &self.key)
    }
}

/// The issuer's JWKS endpoint: serves whatever set it holds and counts the fetches.
#[derive(Clone, Default)]
struct Issuer {
    set: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl Issuer {
    async fn serve(keys: &[&IssuerKey]) -> (Self, String) {
        let issuer = Self::default();
        issuer.publish(keys);
        let app = axum::Router::new()
            .route(
                "/.well-known/jwks.json",
                axum::routing::get(
                    |axum::extract::State(issuer): axum::extract::State<Issuer>| async move {
                        issuer.fetches.fetch_add(1, Ordering::SeqCst);
                        let set = issuer.set.lock().expect("lock").clone();
                        axum::Json(set)
                    },
                ),
            )
            .with_state(issuer.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().expect("addr")
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (issuer, url)
    }

    /// Replaces the published set.
    fn publish(&self, keys: &[&IssuerKey]) {
        let set = JwkSet {
            keys: keys.iter().map(|k| k.public()).collect(),
        };
        *self.set.lock().expect("lock") = serde_json::to_value(set).expect("a JWKS");
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

async fn jwks_app(url: &str, min_refresh: Duration) -> TestApp {
    let settings = JwksSettings {
        min_refresh,
        ..JwksSettings::new(url)
    };
    TestApp::spawn_with(|c| {
        c.identity = IdentityConfig {
            keys: Some(KeySource::Jwks(settings)),
            issuer: Some(super::ISSUER.into()),
            audience: Some(super::AUDIENCE.into()),
            ..Default::default()
        }
    })
    .await
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_against_the_issuers_keys() {
    let (rsa, ec) = (
        IssuerKey::rsa("rsa-1", RSA_A),
        IssuerKey::ec("ec-1", EC_P256),
    );
    let (issuer, url) = Issuer::serve(&[&rsa, &ec]).await;
    let app = jwks_app(&url, Duration::from_secs(10)).await;
    for key in [&rsa, &ec] {
        let user = As::bearer(&app, key.token("7"));
        let order = user.order(&super::my_order(1001, 1)).await;
        assert_eq!(order["user_id"], 7, "{}", key.kid);
    }
    assert_eq!(issuer.fetches(), 1, "the set is cached");
}

#[tokio::test]
async fn a_rotated_key_is_fetched_when_a_token_names_it_and_a_withdrawn_one_stops_working() {
    let (old, new) = (
        IssuerKey::rsa("2026-11", RSA_A),
        IssuerKey::rsa("2026-12", RSA_B),
    );
    let (issuer, url) = Issuer::serve(&[&old]).await;
    let app = jwks_app(&url, Duration::ZERO).await;
    assert_eq!(
        As::bearer(&app, old.token("7")).take_token().await.status(),
        201
    );

    issuer.publish(&[&new]);
    assert_eq!(
        As::bearer(&app, new.token("7")).take_token().await.status(),
        201
    );
    assert_eq!(issuer.fetches(), 2);
    // The set fetched again no longer holds the old key.
    assert_unauthorized(
        As::bearer(&app, old.token("7")).take_token().await,
        true,
        "a withdrawn key",
    )
    .await;
}

#[tokio::test]
async fn made_up_key_ids_fetch_the_set_at_most_once_per_interval() {
    let (known, stranger) = (
        IssuerKey::rsa("known", RSA_A),
        IssuerKey::rsa("made-up", RSA_B),
    );
    let (issuer, url) = Issuer::serve(&[&known]).await;
    let app = jwks_app(&url, Duration::from_secs(3600)).await;
    assert_eq!(
        As::bearer(&app, known.token("7"))
            .take_token()
            .await
            .status(),
        201
    );
    for i in 0..5 {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(format!("made-up-{i}"));
        let token = sign(header, &claims("7"), &stranger.key);
        assert_unauthorized(
            As::bearer(&app, token).take_token().await,
            true,
            "unknown kid",
        )
        .await;
    }
    assert_eq!(
        issuer.fetches(),
        1,
        "no fetch before the interval has passed"
    );
}

#[tokio::test]
async fn algorithm_confusion_and_alg_none_are_refused() {
    let rsa = IssuerKey::rsa("rsa-1", RSA_A);
    let (_issuer, url) = Issuer::serve(&[&rsa]).await;
    let app = jwks_app(&url, Duration::from_secs(10)).await;
    let kid = |alg| {
        let mut header = Header::new(alg);
        header.kid = Some("rsa-1".into());
        header
    };
    // HS256 "signed" with the issuer's public key, the classic confusion attack.
    let confused = sign(kid(Algorithm::HS256), &claims("7"), &hmac_key(RSA_A_PUBLIC));
    // ES256 claimed for an RSA key (signed with a P-256 key).
    let ec = EncodingKey::from_ec_pem(EC_P256).expect("an EC key");
    let mismatched = sign(kid(Algorithm::ES256), &claims("7"), &ec);
    let good = rsa.token("7");
    let alg_none = format!(
        "eyJhbGciOiJub25lIiwia2lkIjoicnNhLTEifQ.{}.",
        good.split('.').nth(1).unwrap_or_default()
    );
    for (why, token) in [
        ("HS256 with the public key", confused),
        ("ES256 on an RSA key", mismatched),
        ("alg none", alg_none),
    ] {
        assert_unauthorized(As::bearer(&app, token).take_token().await, true, why).await;
    }
    assert_eq!(As::bearer(&app, good).take_token().await.status(), 201);
}

#[tokio::test]
async fn keys_that_cannot_be_fetched_are_a_503_not_a_401() {
    let app = jwks_app("http://127.0.0.1:1/jwks.json", Duration::from_secs(10)).await;
    let rsa = IssuerKey::rsa("rsa-1", RSA_A);
    let response = As::bearer(&app, rsa.token("7")).take_token().await;
    assert!(response.headers().contains_key("retry-after"));
    assert_problem(response, 503, "not-ready").await;
}
