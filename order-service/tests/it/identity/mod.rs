//! End-user identity (docs/contract.md §3.3): real tokens signed with `jsonwebtoken`, HS256 against
//! `AUTH_JWT_SECRET` and RS256/ES256 against a JWKS served by a test HTTP server.
//!
//! The keys under `keys/` are throwaway test keys, made for these tests and used nowhere else.

mod cors;
mod jwks;
mod ownership;
mod refusals;

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use order_service::identity::IdentityConfig;
use order_service::identity::settings::KeySource;
use reqwest::{RequestBuilder, Response};
use serde_json::{Value, json};

use crate::helpers::TestApp;

pub const SECRET: &[u8] = b"an HS256 secret of at least 32 bytes, for tests";
pub const ISSUER: &str = "https://id.test.example";
pub const AUDIENCE: &str = "orders";

pub const RSA_A: &[u8] = include_bytes!("keys/rsa-a.pem");
pub const RSA_A_PUBLIC: &[u8] = include_bytes!("keys/rsa-a.pub.pem");
pub const RSA_B: &[u8] = include_bytes!("keys/rsa-b.pem");
pub const EC_P256: &[u8] = include_bytes!("keys/ec-p256.pem");

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Claims a valid token for `user` carries.
pub fn claims(user: &str) -> Value {
    json!({"sub": user, "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600, "iat": now()})
}

/// An HS256 token under `secret`.
pub fn hs256(secret: &[u8], claims: &Value) -> String {
    sign(Header::new(Algorithm::HS256), claims, &hmac_key(secret))
}

pub fn hmac_key(secret: &[u8]) -> EncodingKey {
    EncodingKey::from_secret(secret).expect("an HMAC key")
}

pub fn sign(header: Header, claims: &Value, key: &EncodingKey) -> String {
    jsonwebtoken::encode(&header, claims, key).expect("a signed token")
}

/// A valid HS256 token of `user` for the [`secret_app`].
pub fn token_of(user: i64) -> String {
    hs256(SECRET, &claims(&user.to_string()))
}

/// Identity with the shared secret, issuer and audience checked.
pub fn secret_identity() -> IdentityConfig {
    IdentityConfig {
        keys: Some(KeySource::Secret(SECRET.to_vec())),
        issuer: Some(ISSUER.into()),
        audience: Some(AUDIENCE.into()),
        ..Default::default()
    }
}

/// A service with identity on (HS256).
pub async fn secret_app() -> TestApp {
    TestApp::spawn_with(|c| c.identity = secret_identity()).await
}

/// Requests as one user (or with any `Authorization` value) against a [`TestApp`].
pub struct As<'a> {
    pub app: &'a TestApp,
    pub bearer: String,
}

impl<'a> As<'a> {
    pub fn user(app: &'a TestApp, user: i64) -> Self {
        Self::bearer(app, token_of(user))
    }

    pub fn bearer(app: &'a TestApp, jwt: String) -> Self {
        Self { app, bearer: jwt }
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        request.bearer_auth(&self.bearer)
    }

    pub async fn take_token(&self) -> Response {
        self.authorized(self.app.client.post(self.app.url("/idempotency-tokens")))
            .send()
            .await
            .expect("issue")
    }

    /// A fresh idempotency token of this user.
    pub async fn token(&self) -> String {
        let response = self.take_token().await;
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.expect("json");
        body["token"].as_str().expect("token").to_owned()
    }

    pub async fn post_order(&self, key: &str, body: &Value) -> Response {
        self.authorized(self.app.client.post(self.app.url("/orders")))
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .expect("order")
    }

    /// Places an order with a fresh token; returns it.
    pub async fn order(&self, body: &Value) -> Value {
        let key = self.token().await;
        let response = self.post_order(&key, body).await;
        assert_eq!(response.status(), 202);
        response.json().await.expect("json")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.authorized(self.app.client.get(self.app.url(path)))
            .send()
            .await
            .expect("get")
    }

    pub async fn cancel(&self, order_id: &str) -> Response {
        self.authorized(
            self.app
                .client
                .post(self.app.url(&format!("/orders/{order_id}/cancel"))),
        )
        .send()
        .await
        .expect("cancel")
    }
}

/// An order body without `user_id`: the caller's is used.
pub fn my_order(product_id: i64, quantity: i64) -> Value {
    json!({"items": [{"product_id": product_id, "quantity": quantity}], "amount": "10.50"})
}

/// Asserts a 401 `unauthorized` whose challenge is `Bearer`, with `error="invalid_token"`
/// exactly when `invalid_token` (RFC 6750 §3.1: none when no credentials were sent).
pub async fn assert_unauthorized(response: Response, invalid_token: bool, context: &str) {
    let challenge = testkit::challenge_of(&response);
    if invalid_token {
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{context}: challenge {challenge:?}"
        );
    } else {
        assert_eq!(challenge, "Bearer", "{context}");
    }
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    assert_eq!(status, 401, "{context}: {body}");
    assert_eq!(body["type"], "/problems/unauthorized", "{context}");
}
