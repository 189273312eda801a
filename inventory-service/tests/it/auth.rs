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
            let request = match &credential {
                Some(value) => request.header("Authorization", value),
                None => request,
            };
            let response = request.send().await.expect("request");
            assert_problem(response, 401, "unauthorized").await;
        }
    }
    assert_eq!(app.product(1).await["stock"], 10);
    let response = app
        .anonymous
        .get(app.url("/products/5"))
        .send()
        .await
        .expect("GET");
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
    let response = app
        .anonymous
        .get(app.url("/products"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 200);
}
