//! Every way a request can fail to authenticate: 401 `unauthorized` with a `Bearer`
//! challenge, before anything else about the request is looked at, and nothing changes.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use order_service::identity::IdentityConfig;
use serde_json::{Value, json};

use super::{
    AUDIENCE, As, ISSUER, RSA_A, SECRET, assert_unauthorized, claims, hmac_key, hs256, now,
    secret_app, secret_identity, sign,
};
use crate::helpers::{TestApp, random_uuid};

/// `{"alg":"none","typ":"JWT"}`, base64url.
const ALG_NONE_HEADER: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";

/// Sends the protected operations with `authorization` (or none), bodies and paths valid.
async fn each_protected_operation(
    app: &TestApp,
    authorization: Option<&str>,
) -> Vec<(&'static str, reqwest::Response)> {
    let order = format!("/orders/{}", random_uuid());
    let requests = [
        (
            "issue a token",
            app.client.post(app.url("/idempotency-tokens")),
        ),
        (
            "create an order",
            app.client
                .post(app.url("/orders"))
                .header("Idempotency-Key", random_uuid())
                .json(&super::my_order(1001, 1)),
        ),
        ("get an order", app.client.get(app.url(&order))),
        ("list orders", app.client.get(app.url("/orders"))),
        (
            "cancel an order",
            app.client.post(app.url(&format!("{order}/cancel"))),
        ),
    ];
    let mut answers = Vec::new();
    for (name, mut request) in requests {
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        answers.push((name, request.send().await.expect("request")));
    }
    answers
}

#[tokio::test]
async fn every_protected_operation_without_a_bearer_token_is_401_with_a_bare_challenge() {
    let app = secret_app().await;
    for authorization in [None, Some("Basic dXNlcjpwYXNz"), Some("Bearer"), Some("")] {
        for (name, response) in each_protected_operation(&app, authorization).await {
            assert_unauthorized(response, false, &format!("{name} with {authorization:?}")).await;
        }
    }
    // Health, readiness, metrics and the documents stay open.
    for path in ["/healthz", "/metrics", "/openapi.json", "/docs/"] {
        assert_eq!(app.get(path).await.status(), 200, "{path}");
    }
    assert_eq!(app.count("orders").await, 0);
}

#[tokio::test]
async fn authentication_comes_before_any_validation() {
    let app = secret_app().await;
    let bad_token = "Bearer not.a.jwt";
    for authorization in [None, Some(bad_token)] {
        let invalid = authorization.is_some();
        // Broken JSON and no Idempotency-Key: still 401, not 400.
        let mut request = app
            .client
            .post(app.url("/orders"))
            .header("content-type", "application/json")
            .body("{not json");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        assert_unauthorized(request.send().await.expect("post"), invalid, "broken body").await;
        for path in ["/orders?limit=0&status=LOST", "/orders/banana"] {
            let mut request = app.client.get(app.url(path));
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            assert_unauthorized(request.send().await.expect("get"), invalid, path).await;
        }
    }
    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.count("idempotency_keys").await, 0);
}

/// A valid token of user 7, changed in one way each.
fn refused_tokens() -> Vec<(&'static str, String)> {
    let valid = claims("7");
    let with = |field: &str, value: Value| {
        let mut claims = valid.clone();
        claims[field] = value;
        claims
    };
    let without = |field: &str| {
        let mut claims = valid.clone();
        claims.as_object_mut().map(|c| c.remove(field));
        claims
    };
    let good = hs256(SECRET, &valid);
    let mut parts: Vec<&str> = good.split('.').collect();
    let alg_none = format!("{ALG_NONE_HEADER}.{}.", parts[1]);
    let tampered_claims = hs256(SECRET, &with("sub", json!("8")));
    parts[1] = tampered_claims.split('.').nth(1).unwrap_or_default();
    let tampered = parts.join(".");
    let rsa = EncodingKey::from_rsa_pem(RSA_A).expect("an RSA key");
    vec![
        ("not a JWT", "abc".into()),
        ("three garbage parts", "a.b.c".into()),
        ("alg none", alg_none),
        (
            "another secret",
            hs256(b"another secret, also 32 bytes long!!", &valid),
        ),
        ("claims changed after signing", tampered),
        (
            "HS384, not configured",
            sign(Header::new(Algorithm::HS384), &valid, &hmac_key(SECRET)),
        ),
        (
            "RS256 against a secret",
            sign(Header::new(Algorithm::RS256), &valid, &rsa),
        ),
        (
            "expired past the leeway",
            hs256(SECRET, &with("exp", json!(now() - 120))),
        ),
        (
            "expired ten seconds ago, past the default leeway of five",
            hs256(SECRET, &with("exp", json!(now() - 10))),
        ),
        (
            "not valid before, past the leeway",
            hs256(SECRET, &with("nbf", json!(now() + 120))),
        ),
        (
            "not valid for ten seconds yet",
            hs256(SECRET, &with("nbf", json!(now() + 10))),
        ),
        ("no exp", hs256(SECRET, &without("exp"))),
        (
            "another issuer",
            hs256(SECRET, &with("iss", json!("https://elsewhere.example"))),
        ),
        ("no issuer", hs256(SECRET, &without("iss"))),
        (
            "another audience",
            hs256(SECRET, &with("aud", json!("billing"))),
        ),
        ("no audience", hs256(SECRET, &without("aud"))),
        ("no sub", hs256(SECRET, &without("sub"))),
        (
            "sub a number, not a string",
            hs256(SECRET, &with("sub", json!(7))),
        ),
        ("sub zero", hs256(SECRET, &with("sub", json!("0")))),
        ("sub negative", hs256(SECRET, &with("sub", json!("-7")))),
        (
            "sub not a number",
            hs256(SECRET, &with("sub", json!("alice"))),
        ),
        (
            "sub past 64 bits",
            hs256(SECRET, &with("sub", json!("9223372036854775808"))),
        ),
    ]
}

#[tokio::test]
async fn tokens_that_do_not_hold_are_401_invalid_token_on_every_operation() {
    let app = secret_app().await;
    for (why, token) in refused_tokens() {
        let authorization = format!("Bearer {token}");
        for (name, response) in each_protected_operation(&app, Some(&authorization)).await {
            assert_unauthorized(response, true, &format!("{why}: {name}")).await;
        }
    }
    assert_eq!(app.count("orders").await, 0);
}

#[tokio::test]
async fn clock_skew_within_the_leeway_is_tolerated_and_the_scheme_name_is_case_insensitive() {
    let app = secret_app().await;
    let mut skewed = claims("7");
    // Within the default leeway of five seconds, with a second to spare for the test itself.
    skewed["exp"] = json!(now() - 3);
    skewed["nbf"] = json!(now() + 3);
    let response = app
        .client
        .post(app.url("/idempotency-tokens"))
        .header(
            "authorization",
            format!("bEaReR {}", hs256(SECRET, &skewed)),
        )
        .send()
        .await
        .expect("issue");
    assert_eq!(response.status(), 201);
    // Audiences as a list, and claims the service does not read, are fine.
    let mut listed = claims("7");
    listed["aud"] = json!(["billing", AUDIENCE]);
    listed["scope"] = json!("orders:write");
    listed["iss"] = json!(ISSUER);
    let user = As::bearer(&app, hs256(SECRET, &listed));
    assert_eq!(user.take_token().await.status(), 201);
}

#[tokio::test]
async fn a_wider_leeway_when_configured_tolerates_more_skew_and_no_more() {
    let app = TestApp::spawn_with(|c| {
        c.identity = IdentityConfig {
            leeway_secs: 60,
            ..secret_identity()
        }
    })
    .await;
    let mut skewed = claims("7");
    skewed["exp"] = json!(now() - 20);
    assert_eq!(
        As::bearer(&app, hs256(SECRET, &skewed))
            .take_token()
            .await
            .status(),
        201
    );
    skewed["exp"] = json!(now() - 120);
    let refused = As::bearer(&app, hs256(SECRET, &skewed)).take_token().await;
    assert_eq!(refused.status(), 401);
}
