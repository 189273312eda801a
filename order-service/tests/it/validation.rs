//! docs/contract.md §3: bad input gets a clear 4xx problem+json and changes nothing.

use serde_json::json;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem};

testkit::on_each_backend!(
    invalid_orders_are_refused_and_change_nothing,
    the_flat_one_item_form_is_accepted,
    a_body_over_64_kib_is_refused_with_413,
    control_characters_in_any_string_are_422_and_change_nothing,
);

async fn invalid_orders_are_refused_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let item = json!([{"product_id": 1001, "quantity": 1}]);
    let too_many: Vec<_> = (1..=101)
        .map(|p| json!({"product_id": p, "quantity": 1}))
        .collect();
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("truncated JSON", "{\"user_id\": 1,".into(), 400, "malformed-json"),
        ("not JSON", "user_id=1".into(), 400, "malformed-json"),
        ("empty body", String::new(), 400, "malformed-json"),
        ("trailing comma", "{\"user_id\": 1,}".into(), 400, "malformed-json"),
        ("an array", "[]".into(), 422, "validation-failed"),
        ("user_id zero", json!({"user_id": 0, "items": item, "amount": 1}).to_string(), 422, "validation-failed"),
        ("user_id negative", json!({"user_id": -1, "items": item, "amount": 1}).to_string(), 422, "validation-failed"),
        ("user_id a string", json!({"user_id": "1", "items": item, "amount": 1}).to_string(), 422, "validation-failed"),
        ("user_id too large", "{\"user_id\": 9223372036854775808, \"items\": [{\"product_id\": 1, \"quantity\": 1}], \"amount\": 1}".into(), 422, "validation-failed"),
        ("no items", json!({"user_id": 1, "items": [], "amount": 1}).to_string(), 422, "validation-failed"),
        ("101 items", json!({"user_id": 1, "items": too_many, "amount": 1}).to_string(), 422, "validation-failed"),
        ("product twice", json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 1}], "amount": 1}).to_string(), 422, "validation-failed"),
        ("quantity zero", json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 0}], "amount": 1}).to_string(), 422, "validation-failed"),
        ("quantity too large", json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1_000_001}], "amount": 1}).to_string(), 422, "validation-failed"),
        ("product_id zero", json!({"user_id": 1, "items": [{"product_id": 0, "quantity": 1}], "amount": 1}).to_string(), 422, "validation-failed"),
        ("negative amount", json!({"user_id": 1, "items": item, "amount": -0.01}).to_string(), 422, "validation-failed"),
        ("three decimals", json!({"user_id": 1, "items": item, "amount": "1.001"}).to_string(), 422, "validation-failed"),
        ("amount not a number", json!({"user_id": 1, "items": item, "amount": "ten"}).to_string(), 422, "validation-failed"),
        ("missing amount", json!({"user_id": 1, "items": item}).to_string(), 422, "validation-failed"),
        ("client-sent status", json!({"user_id": 1, "items": item, "amount": 1, "status": "CONFIRMED"}).to_string(), 422, "validation-failed"),
        ("unknown item field", json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1, "price": 2}], "amount": 1}).to_string(), 422, "validation-failed"),
        ("half a flat order", json!({"user_id": 1, "product_id": 1, "amount": 1}).to_string(), 422, "validation-failed"),
        ("a key given twice", "{\"user_id\": 1, \"user_id\": 2, \"items\": [{\"product_id\": 1, \"quantity\": 1}], \"amount\": 1}".into(), 422, "validation-failed"),
        ("an item key given twice", "{\"user_id\": 1, \"items\": [{\"product_id\": 1, \"quantity\": 1, \"quantity\": 2}], \"amount\": 1}".into(), 422, "validation-failed"),
    ];
    for (name, body, status, slug) in cases {
        // A fresh token each time, so "unknown token" can never be the reason.
        let token = app.issue_token().await;
        let response = app.post_order_raw(Some(&token), body).await;
        assert_eq!(response.status().as_u16(), status, "case: {name}");
        assert_problem(response, status, slug).await;
    }
    // JSON text is UTF-8: bytes that are not are broken JSON, even inside a string.
    let token = app.issue_token().await;
    let not_utf8 = b"{\"user_id\": 1, \"items\": [{\"product_id\": 1, \"quantity\": 1}], \"amount\": \"1\xff\"}";
    let response = app.post_order_raw(Some(&token), not_utf8.to_vec()).await;
    assert_problem(response, 400, "malformed-json").await;
    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(app.count("idempotency_keys").await, 0);
}

async fn the_flat_one_item_form_is_accepted(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let body = json!({"user_id": 1, "product_id": 1001, "quantity": 2, "amount": "200"});
    let response = app.post_order(&token, &body).await;
    assert_eq!(response.status(), 202);
    let order: serde_json::Value = response.json().await.expect("json");
    assert_eq!(order["items"], json!([{"product_id": 1001, "quantity": 2}]));
    assert_eq!(order["amount"], "200.00");
}

async fn a_body_over_64_kib_is_refused_with_413(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let padding = "x".repeat(70 * 1024);
    let body = format!("{{\"user_id\": 1, \"pad\": \"{padding}\"}}");
    let response = app.post_order_raw(Some(&token), body).await;
    assert_problem(response, 413, "payload-too-large").await;
    assert_eq!(app.count("orders").await, 0);
}

/// docs/contract.md §3: a control character (U+0000–U+001F, U+007F) in any string — body, key, query or
/// header — is a 422, and neither uses up the token nor writes anything.
async fn control_characters_in_any_string_are_422_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let item = json!([{"product_id": 1001, "quantity": 1}]);
    let bodies = [
        json!({"user_id": 1, "items": item, "amount": "1\u{0}"}),
        json!({"user_id": 1, "items": item, "amount": "\t12.50"}),
        json!({"user_id": 1, "items": item, "amount": "12.50\n"}),
        json!({"user_id": 1, "items": item, "amount": "12\u{7f}"}),
        json!({"user_id": 1, "items": item, "amount": 1, "no\u{0}te": "x"}),
    ];
    let token = app.issue_token().await;
    for body in bodies {
        let response = app.post_order(&token, &body).await;
        assert_eq!(response.status(), 422, "{body}");
        assert_problem(response, 422, "validation-failed").await;
    }
    let valid = json!({"user_id": 1, "items": item, "amount": "12.50"});
    let with_tab = format!("{token}\tx");
    let response = app.post_order(&with_tab, &valid).await;
    assert_problem(response, 422, "validation-failed").await;
    for query in [
        "/orders?user_id=1%09",
        "/orders?status=PENDING%00",
        "/orders?limit=5%0A",
        "/orders?after=%7F",
        "/orders?x%00=1",
    ] {
        assert_problem(app.get(query).await, 422, "validation-failed").await;
    }
    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.count("idempotency_keys").await, 0);
    // The refusals left the token unused.
    assert_eq!(app.post_order(&token, &valid).await.status(), 202);
}
