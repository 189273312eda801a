//! Admin endpoints need `Authorization: Bearer <ADMIN_TOKEN>`; without a configured token,
//! nothing gets in.

use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_problem};

/// Every admin endpoint with a valid body.
fn admin_requests(app: &TestApp, client: &reqwest::Client) -> Vec<reqwest::RequestBuilder> {
    vec![
        client
            .post(app.url("/products"))
            .json(&json!({"product_id": 5, "name": "x", "stock": 1})),
        client
            .post(app.url("/products/1/restock"))
            .json(&json!({"quantity": 1})),
        client
            .post(app.url("/deductions"))
            .json(&json!({"deduction_id": "d", "items": [{"product_id": 1, "quantity": 1}]})),
    ]
}

#[tokio::test]
async fn admin_endpoints_refuse_a_missing_or_wrong_token_and_change_nothing() {
    let app = TestApp::spawn().await;
    app.create_product(1, 10).await;
    let credentials = [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(format!("Bearer {ADMIN_TOKEN}x")),
        Some(format!("Basic {ADMIN_TOKEN}")),
        Some(ADMIN_TOKEN.to_owned()),
        Some("Bearer ".to_owned()),
    ];
    for credential in credentials {
        for request in admin_requests(&app, &app.anonymous) {
            let (response, _) = testkit::send_with_credential(request, credential.as_deref()).await;
            assert_problem(response, 401, "unauthorized").await;
        }
    }
    assert_eq!(app.product(1).await["stock"], 10);
    let response = app.get("/products/5").await;
    assert_eq!(response.status(), 404);
    assert_eq!(app.deduction_rows().await, 0);
}

#[tokio::test]
async fn with_no_admin_token_configured_every_admin_request_is_refused() {
    let app = TestApp::spawn_with(|c| c.admin_token = None).await;
    for request in admin_requests(&app, &app.admin) {
        let response = request.send().await.expect("request");
        assert_problem(response, 401, "unauthorized").await;
    }
    let response = app
        .anonymous
        .post(app.url("/products"))
        .header("Authorization", "Bearer ")
        .json(&json!({"product_id": 5, "name": "x", "stock": 1}))
        .send()
        .await
        .expect("request");
    assert_problem(response, 401, "unauthorized").await;
}

#[tokio::test]
async fn reading_products_needs_no_token() {
    let app = TestApp::spawn().await;
    app.create_product(1, 1).await;
    let response = app.get("/products").await;
    assert_eq!(response.status(), 200);
}

/// Every admin route, as `(method, path)`; the body does not matter to a refusal.
const ADMIN_ROUTES: [(&str, &str); 5] = [
    ("POST", "/products"),
    ("POST", "/products/1/restock"),
    ("POST", "/deductions"),
    ("GET", "/admin/outbox"),
    ("POST", "/admin/outbox/1/retry"),
];

#[tokio::test]
async fn every_401_carries_a_bearer_challenge() {
    let app = TestApp::spawn().await;
    for (method, path) in ADMIN_ROUTES {
        for credential in testkit::REFUSED_CREDENTIALS {
            let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let request = app.anonymous.request(method.clone(), app.url(path));
            let (response, challenge) = testkit::send_with_credential(request, credential).await;
            assert!(
                challenge.starts_with("Bearer"),
                "{method} {path} with {credential:?}: {challenge:?}"
            );
            assert_problem(response, 401, "unauthorized").await;
        }
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = TestApp::spawn().await;
    for (id, scheme) in [(11, "bearer"), (12, "BEARER"), (13, "Bearer")] {
        let response = app
            .anonymous
            .post(app.url("/products"))
            .header("Authorization", format!("{scheme} {ADMIN_TOKEN}"))
            .json(&json!({"product_id": id, "name": "x", "stock": 1}))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 201, "{scheme}");
    }
}

#[tokio::test]
async fn with_reservations_require_admin_reading_a_reservation_needs_the_admin_token() {
    let path = "/reservations/0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80";
    let open = TestApp::spawn().await;
    let response = open.get(path).await;
    assert_problem(response, 404, "not-found").await;

    let closed = TestApp::spawn_with(|c| c.reservations_require_admin = true).await;
    for credential in testkit::REFUSED_CREDENTIALS {
        let request = closed.anonymous.get(closed.url(path));
        let (response, challenge) = testkit::send_with_credential(request, credential).await;
        assert_eq!(challenge, "Bearer realm=\"admin\"", "{credential:?}");
        assert_problem(response, 401, "unauthorized").await;
    }
    // With the token it answers as before: this order was never seen.
    let response = closed
        .admin
        .get(closed.url(path))
        .send()
        .await
        .expect("GET");
    assert_problem(response, 404, "not-found").await;
}

/// The real binary given the identity setting order-service reads closes reservations by
/// itself: both services can be handed the same environment.
#[tokio::test]
async fn the_binary_closes_reservations_when_it_sees_the_identity_setting() {
    use testkit::{KilledOnDrop, TestDatabase, TestVhost, eventually};

    let path = "/reservations/0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80";
    let db = TestDatabase::create("inventory_identity_env", &inventory_service::MIGRATOR).await;
    let vhost = TestVhost::create();
    let port = testkit::free_port();
    let _child = KilledOnDrop(
        testkit::service_command_on(
            port,
            env!("CARGO_BIN_EXE_inventory-service"),
            &db.url,
            &vhost.url,
        )
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env(
            "AUTH_JWT_SECRET",
            "a secret of at least thirty-two bytes, shared",
        )
        .spawn()
        .expect("start the binary"),
    );
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}{path}");
    let anonymous = eventually(std::time::Duration::from_secs(30), || async {
        client.get(&url).send().await.ok()
    })
    .await;
    assert_problem(anonymous, 401, "unauthorized").await;
    let admin = client
        .get(&url)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("GET");
    assert_problem(admin, 404, "not-found").await;
}
