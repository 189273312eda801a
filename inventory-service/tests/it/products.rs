//! `/products`: create, read, list with cursor pagination.

use serde_json::{Value, json};
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem};

testkit::on_each_backend!(
    a_created_product_is_answered_201_and_can_be_read_back,
    creating_a_product_twice_is_a_409_product_exists_and_keeps_the_first,
    a_product_that_does_not_exist_is_a_404_problem,
    products_are_listed_in_ascending_id_a_page_at_a_time,
    the_list_limit_defaults_to_20_is_capped_at_100_and_refuses_nonsense,
);

async fn a_created_product_is_answered_201_and_can_be_read_back(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let response = app
        .admin
        .post(app.url("/products"))
        .json(&json!({"product_id": 1001, "name": "  Espresso beans  ", "stock": 10}))
        .send()
        .await
        .expect("POST /products");
    assert_eq!(response.status(), 201);
    assert_eq!(
        response.headers().get("location").map(|v| v.as_bytes()),
        Some(&b"/products/1001"[..])
    );
    let created: Value = response.json().await.expect("json");
    assert_eq!(created["product_id"], 1001);
    assert_eq!(created["name"], "Espresso beans");
    assert_eq!(created["stock"], 10);
    assert_eq!(created["version"], 0);
    assert!(created["updated_at"].is_string());
    assert_eq!(app.product(1001).await, created);
}

async fn creating_a_product_twice_is_a_409_product_exists_and_keeps_the_first(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let first = app.create_product(7, 3).await;
    let response = app
        .admin
        .post(app.url("/products"))
        .json(&json!({"product_id": 7, "name": "Other", "stock": 99}))
        .send()
        .await
        .expect("POST /products");
    assert_problem(response, 409, "product-exists").await;
    assert_eq!(app.product(7).await, first);
}

async fn a_product_that_does_not_exist_is_a_404_problem(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    for path in [
        "/products/5",
        "/products/0",
        "/products/-1",
        "/products/banana",
        "/products/99999999999999999999",
    ] {
        let response = app.anonymous.get(app.url(path)).send().await.expect("GET");
        assert_problem(response, 404, "not-found").await;
    }
}

async fn page(app: &TestApp, query: &str) -> (Vec<i64>, Value) {
    let response = app.get(&format!("/products{query}")).await;
    assert_eq!(response.status(), 200, "{query}");
    let body: Value = response.json().await.expect("json");
    let ids = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["product_id"].as_i64().expect("an id"))
        .collect();
    (ids, body["next"].clone())
}

async fn products_are_listed_in_ascending_id_a_page_at_a_time(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    for id in [5, 3, 1, 4, 2] {
        app.create_product(id, 1).await;
    }
    assert_eq!(page(&app, "?limit=2").await, (vec![1, 2], json!("2")));
    assert_eq!(
        page(&app, "?limit=2&after=2").await,
        (vec![3, 4], json!("4"))
    );
    assert_eq!(page(&app, "?limit=2&after=4").await, (vec![5], Value::Null));
    assert_eq!(page(&app, "").await, (vec![1, 2, 3, 4, 5], Value::Null));
    assert_eq!(page(&app, "?after=5").await, (vec![], Value::Null));
}

async fn the_list_limit_defaults_to_20_is_capped_at_100_and_refuses_nonsense(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let rows: Vec<String> = (1..=120).map(|n| format!("({n}, 'p{n}', 1)")).collect();
    let seed = format!(
        "INSERT INTO products (product_id, name, stock) VALUES {}",
        rows.join(", ")
    );
    app.database.execute(&seed, &seed).await;
    assert_eq!(page(&app, "").await.0.len(), 20);
    assert_eq!(page(&app, "?limit=100").await.0.len(), 100);
    let (ids, next) = page(&app, "?limit=1000").await;
    assert_eq!((ids.len(), next), (100, json!("100")));
    for bad in [
        "?limit=0",
        "?limit=-1",
        "?limit=abc",
        "?limit=",
        "?limit=1.5",
        "?after=x",
        "?after=-3",
    ] {
        let response = app.get(&format!("/products{bad}")).await;
        assert_problem(response, 422, "validation-failed").await;
    }
}
