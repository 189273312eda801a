//! `GET /orders/{id}` and `GET /orders`: filters, newest first, cursors, limit rules.

use serde_json::Value;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem, order_body};

testkit::on_each_backend!(
    pages_walk_every_order_newest_first_without_repeats,
    filters_narrow_the_list,
    an_unknown_order_is_404,
);

async fn create(app: &TestApp, user_id: i64) -> String {
    let token = app.issue_token().await;
    let order: Value = app
        .post_order(&token, &order_body(user_id, 1001, 1))
        .await
        .json()
        .await
        .expect("json");
    order["order_id"].as_str().expect("id").to_owned()
}

async fn pages_walk_every_order_newest_first_without_repeats(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let mut created = Vec::new();
    for i in 0..5 {
        created.push(create(&app, 1 + i % 2).await);
    }
    let mut seen = Vec::new();
    let mut path = "/orders?limit=2".to_owned();
    loop {
        let page: Value = app.get(&path).await.json().await.expect("json");
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 2);
        seen.extend(
            items
                .iter()
                .map(|o| o["order_id"].as_str().expect("id").to_owned()),
        );
        match page["next"].as_str() {
            Some(cursor) => path = format!("/orders?limit=2&after={cursor}"),
            None => break,
        }
    }
    created.reverse();
    assert_eq!(seen, created);
}

async fn filters_narrow_the_list(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let mine = create(&app, 42).await;
    create(&app, 43).await;
    let page: Value = app
        .get("/orders?user_id=42")
        .await
        .json()
        .await
        .expect("json");
    let ids: Vec<_> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| o["order_id"].clone())
        .collect();
    assert_eq!(ids, vec![Value::String(mine)]);
    let pending: Value = app
        .get("/orders?status=PENDING")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(pending["items"].as_array().expect("items").len(), 2);
    let confirmed: Value = app
        .get("/orders?status=CONFIRMED")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(confirmed["items"].as_array().expect("items").len(), 0);
    assert_eq!(confirmed["next"], Value::Null);
}

#[tokio::test]
async fn limits_are_capped_and_bad_parameters_are_422() {
    let app = TestApp::spawn().await;
    sqlx::query(
        "INSERT INTO orders (order_id, user_id, items, amount) \
         SELECT gen_random_uuid(), 1, '[{\"product_id\": 1, \"quantity\": 1}]', 1 \
         FROM generate_series(1, 105)",
    )
    .execute(&app.db().pool)
    .await
    .expect("seed");
    for (query, expected) in [
        ("", 20),
        ("?limit=1000", 100),
        ("?limit=100", 100),
        ("?limit=7", 7),
    ] {
        let page: Value = app
            .get(&format!("/orders{query}"))
            .await
            .json()
            .await
            .expect("json");
        assert_eq!(
            page["items"].as_array().expect("items").len(),
            expected,
            "{query}"
        );
    }
    for bad in [
        "limit=0",
        "limit=-1",
        "limit=abc",
        "user_id=0",
        "user_id=x",
        "status=SHIPPED",
        "after=garbage",
    ] {
        let response = app.get(&format!("/orders?{bad}")).await;
        assert_problem(response, 422, "validation-failed").await;
    }
}

async fn an_unknown_order_is_404(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let missing = app.get(&format!("/orders/{}", uuid::Uuid::new_v4())).await;
    assert_problem(missing, 404, "not-found").await;
    assert_problem(app.get("/orders/not-a-uuid").await, 404, "not-found").await;
}
