//! The same flows with end-user identity on (docs/contract.md §3.3): a user's order is confirmed,
//! cancelled and its stock given back; reservations are kept to the admin token, and
//! reconciliation, which reads them, still recovers a lost cancellation.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use order_service::identity::IdentityConfig;
use order_service::identity::settings::KeySource;
use reqwest::{Method, StatusCode};
use serde_json::json;
use testkit::Backend;

use crate::helpers::{Stack, id};

testkit::on_each_backend!(a_users_order_settles_cancels_and_is_reconciled_with_identity_on);

const SECRET: &[u8] = b"the e2e identity secret, 32 bytes or more";

/// A token of `user`, valid for ten minutes.
fn token_of(user: &str) -> String {
    let exp = chrono::Utc::now().timestamp() + 600;
    let key = EncodingKey::from_secret(SECRET).expect("an HMAC key");
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": user, "exp": exp}),
        &key,
    )
    .expect("a token")
}

async fn a_users_order_settles_cancels_and_is_reconciled_with_identity_on(backend: Backend) {
    let mut stack = Stack::spawn_with(backend, false, |c| {
        c.identity = IdentityConfig {
            keys: Some(KeySource::Secret(SECRET.to_vec())),
            ..Default::default()
        };
        c.reconcile_after = Duration::from_millis(300);
        c.reconcile_every = Duration::from_millis(200);
    })
    .await;
    stack.reservations_require_admin = true;
    stack.start_inventory().await;
    // The stack's orders name user 1.
    stack.bearer = Some(token_of("1"));
    let (kept, cancelled) = stack.two_confirmed_orders().await;

    // Nobody else sees or cancels them; nobody without the admin token reads reservations.
    let stranger = stack
        .client
        .post(stack.order_url(&format!("/orders/{}/cancel", id(&kept))))
        .bearer_auth(token_of("2"))
        .send()
        .await
        .expect("cancel");
    assert_eq!(stranger.status(), StatusCode::NOT_FOUND);
    let anonymous = stack
        .client
        .get(stack.inventory_url(&format!("/reservations/{}", id(&kept))))
        .send()
        .await
        .expect("reservation");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let unauthenticated = stack
        .client
        .request(Method::GET, stack.order_url("/orders"))
        .send()
        .await
        .expect("list");
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);

    // A cancellation lost on its way: reconciliation asks inventory (with the admin token)
    // and sends it again, and the stock comes back once.
    stack
        .cancel_and_lose_the_cancellation(&id(&cancelled))
        .await;
    stack.released(&id(&cancelled)).await;
    assert_eq!(stack.stock(1001).await, 8, "the 3 units back, once");
    assert_eq!(stack.order(&id(&kept)).await["status"], "CONFIRMED");
    let listed: serde_json::Value = stack
        .to_orders(Method::GET, "/orders")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2));
}
