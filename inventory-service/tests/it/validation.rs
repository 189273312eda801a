//! Input validation: broken JSON is a 400, well-formed but invalid input a 422, an oversized
//! body a 413; none of them changes anything.

use serde_json::json;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem};

testkit::on_each_backend!(
    invalid_deductions_are_refused_and_deduct_nothing,
    invalid_products_are_refused_and_nothing_is_created,
    invalid_restocks_are_refused_and_add_nothing,
    control_characters_in_any_string_are_422_and_change_nothing,
);

async fn post_raw(app: &TestApp, path: &str, body: String) -> reqwest::Response {
    app.admin
        .post(app.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("POST")
}

fn deduction(id: serde_json::Value, items: serde_json::Value) -> String {
    json!({"deduction_id": id, "items": items}).to_string()
}

async fn invalid_deductions_are_refused_and_deduct_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    let item = |p: serde_json::Value, q: serde_json::Value| json!({"product_id": p, "quantity": q});
    let hundred_and_one: Vec<_> = (1..=101).map(|p| item(json!(p), json!(1))).collect();
    let oversized = deduction(
        json!("x".repeat(70 * 1024)),
        json!([item(json!(1), json!(1))]),
    );
    let cases: Vec<(String, u16, &str)> = vec![
        ("{".to_owned(), 400, "malformed-json"),
        (String::new(), 400, "malformed-json"),
        (
            "{\"deduction_id\": \"d\",}".to_owned(),
            400,
            "malformed-json",
        ),
        (
            deduction(json!("d"), json!([item(json!(1), json!(0))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(1), json!(-2))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(1), json!(1_000_001))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(1), json!("1"))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(1), json!(1.5))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(0), json!(1))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d"), json!([item(json!(-1), json!(1))])),
            422,
            "validation-failed",
        ),
        (deduction(json!("d"), json!([])), 422, "validation-failed"),
        (
            deduction(json!("d"), json!(hundred_and_one)),
            422,
            "validation-failed",
        ),
        (
            deduction(
                json!("d"),
                json!([
                    item(json!(1), json!(1)),
                    item(json!(2), json!(1)),
                    item(json!(1), json!(2))
                ]),
            ),
            422,
            "validation-failed",
        ),
        (
            deduction(json!(""), json!([item(json!(1), json!(1))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("  "), json!([item(json!(1), json!(1))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!("d".repeat(129)), json!([item(json!(1), json!(1))])),
            422,
            "validation-failed",
        ),
        (
            deduction(json!(5), json!([item(json!(1), json!(1))])),
            422,
            "validation-failed",
        ),
        (
            json!({"deduction_id": "d"}).to_string(),
            422,
            "validation-failed",
        ),
        (
            json!({"deduction_id": "d", "items": [item(json!(1), json!(1))], "status": "APPLIED"})
                .to_string(),
            422,
            "validation-failed",
        ),
        (
            deduction(
                json!("d"),
                json!([{"product_id": 1, "quantity": 1, "price": 3}]),
            ),
            422,
            "validation-failed",
        ),
        ("[]".to_owned(), 422, "validation-failed"),
        (oversized, 413, "payload-too-large"),
    ];
    for (body, status, slug) in cases {
        let shown: String = body.chars().take(80).collect();
        let response = post_raw(&app, "/deductions", body).await;
        assert_eq!(response.status(), status, "{shown}");
        assert_problem(response, status, slug).await;
    }
    assert_eq!((app.stock(1).await, app.stock(2).await), (10, 10));
    assert_eq!(app.deduction_rows().await, 0);
}

async fn invalid_products_are_refused_and_nothing_is_created(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let product = |id: serde_json::Value, name: serde_json::Value, stock: serde_json::Value| {
        json!({"product_id": id, "name": name, "stock": stock}).to_string()
    };
    let cases: Vec<(String, u16)> = vec![
        ("{\"product_id\": 1".to_owned(), 400),
        ("nonsense".to_owned(), 400),
        (product(json!(0), json!("a"), json!(1)), 422),
        (product(json!(-4), json!("a"), json!(1)), 422),
        (product(json!("1"), json!("a"), json!(1)), 422),
        (product(json!(1), json!(""), json!(1)), 422),
        (product(json!(1), json!("   "), json!(1)), 422),
        (product(json!(1), json!("n".repeat(201)), json!(1)), 422),
        (product(json!(1), json!("a"), json!(-1)), 422),
        (product(json!(1), json!("a"), json!(1_000_000_001_i64)), 422),
        (json!({"product_id": 1, "name": "a"}).to_string(), 422),
        (
            json!({"product_id": 1, "name": "a", "stock": 1, "version": 9}).to_string(),
            422,
        ),
        (
            product(json!(1), json!("n".repeat(70 * 1024)), json!(1)),
            413,
        ),
    ];
    for (body, status) in cases {
        let shown: String = body.chars().take(80).collect();
        let response = post_raw(&app, "/products", body).await;
        assert_eq!(response.status(), status, "{shown}");
    }
    let list: serde_json::Value = app.get("/products").await.json().await.expect("json");
    assert_eq!(list["items"], json!([]));
}

async fn invalid_restocks_are_refused_and_add_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 1).await;
    let cases = [
        ("{".to_owned(), 400, "malformed-json"),
        (
            json!({"quantity": "5"}).to_string(),
            422,
            "validation-failed",
        ),
        (
            json!({"quantity": 5, "stock": 100}).to_string(),
            422,
            "validation-failed",
        ),
        (json!({}).to_string(), 422, "validation-failed"),
    ];
    for (body, status, slug) in cases {
        assert_problem(
            post_raw(&app, "/products/1/restock", body).await,
            status,
            slug,
        )
        .await;
    }
    assert_eq!(app.stock(1).await, 1);
}

/// docs/contract.md §3: a control character (U+0000–U+001F, U+007F) in any string is a 422 and changes
/// nothing; a NUL used to reach PostgreSQL, which refuses it in `text`, and answer 500.
async fn control_characters_in_any_string_are_422_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    let item = json!([{"product_id": 1, "quantity": 1}]);
    let bodies: Vec<(&str, String)> = vec![
        (
            "/products",
            json!({"product_id": 2, "name": "nul\u{0}", "stock": 1}).to_string(),
        ),
        (
            "/products",
            json!({"product_id": 2, "name": "tab\there", "stock": 1}).to_string(),
        ),
        (
            "/products",
            json!({"product_id": 2, "name": "del\u{7f}", "stock": 1}).to_string(),
        ),
        (
            "/products",
            json!({"product_id": 2, "name": "unit\u{1f}", "stock": 1}).to_string(),
        ),
        ("/deductions", deduction(json!("d\u{0}"), item.clone())),
        ("/deductions", deduction(json!("line\nbreak"), item.clone())),
        ("/deductions", deduction(json!("del\u{7f}"), item.clone())),
        // A key holding one, even where the key would be refused anyway.
        (
            "/deductions",
            json!({"deduction_id": "d", "items": item, "x\u{0}": 1}).to_string(),
        ),
    ];
    for (path, body) in bodies {
        let shown = body.escape_debug().to_string();
        let response = post_raw(&app, path, body).await;
        assert_eq!(response.status(), 422, "{path} {shown}");
        assert_problem(response, 422, "validation-failed").await;
    }
    // A tab is the only control character HTTP lets through in a header value.
    for key in ["k\t1", "tab\t\tkey"] {
        let response = app.restock(1, 5, Some(key)).await;
        assert_problem(response, 422, "validation-failed").await;
    }
    for query in [
        "/products?after=1%00",
        "/products?limit=5%09",
        "/products?x%00=1",
    ] {
        let response = app.anonymous.get(app.url(query)).send().await.expect("GET");
        assert_problem(response, 422, "validation-failed").await;
    }
    let response = app
        .admin
        .get(app.url("/admin/outbox?status=dead%00"))
        .send()
        .await
        .expect("GET");
    assert_problem(response, 422, "validation-failed").await;
    // A hold's id in the path: read, and ended.
    assert_problem(app.read_hold("h%00").await, 422, "validation-failed").await;
    for step in ["confirm", "cancel"] {
        let response = app.end_hold("h%00", step).await;
        assert_problem(response, 422, "validation-failed").await;
    }

    assert_eq!(app.stock(1).await, 10);
    assert_eq!(app.deduction_rows().await, 0);
    assert_eq!(app.database.count("SELECT count(*) FROM holds").await, 0);
    let missing = app.get("/products/2").await;
    assert_eq!(missing.status(), 404);
}
