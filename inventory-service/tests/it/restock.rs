//! `POST /products/{id}/restock`: adds stock, once per idempotency key.

use serde_json::Value;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem, assert_replays};

testkit::on_each_backend!(
    a_restock_adds_stock_and_bumps_the_version,
    a_repeated_idempotency_key_adds_nothing_and_replays_the_first_response,
    an_idempotency_key_reused_for_another_restock_is_refused,
    a_refused_restock_does_not_use_up_its_key,
    restock_input_out_of_range_is_a_422_and_changes_nothing,
    a_shipment_as_large_as_a_products_first_stock_is_one_restock,
);

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    concurrent_restocks_with_one_key_add_once,
);

async fn a_restock_adds_stock_and_bumps_the_version(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 2).await;
    let response = app.restock(1, 5, None).await;
    assert_eq!(response.status(), 200);
    let product: Value = response.json().await.expect("json");
    assert_eq!(
        (product["stock"].as_i64(), product["version"].as_i64()),
        (Some(7), Some(1))
    );
    // Without a key, a second restock is a second restock.
    assert_eq!(app.restock(1, 5, None).await.status(), 200);
    assert_eq!(app.stock(1).await, 12);
}

async fn a_repeated_idempotency_key_adds_nothing_and_replays_the_first_response(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 0).await;
    let first = app.restock(1, 5, Some("restock-1")).await;
    assert_eq!(first.status(), 200);
    let first = first.bytes().await.expect("body");
    // Stock moves in between: the replay still answers the first response.
    assert_eq!(app.deduct("d", &[(1, 1)]).await.status(), 200);

    assert_replays(app.restock(1, 5, Some("restock-1")).await, &first).await;
    assert_eq!(app.stock(1).await, 4);
}

async fn an_idempotency_key_reused_for_another_restock_is_refused(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 0).await;
    app.create_product(2, 0).await;
    assert_eq!(app.restock(1, 5, Some("k")).await.status(), 200);
    assert_problem(
        app.restock(1, 6, Some("k")).await,
        422,
        "idempotency-key-reused",
    )
    .await;
    assert_problem(
        app.restock(2, 5, Some("k")).await,
        422,
        "idempotency-key-reused",
    )
    .await;
    assert_eq!((app.stock(1).await, app.stock(2).await), (5, 0));
}

async fn a_refused_restock_does_not_use_up_its_key(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    assert_problem(app.restock(9, 5, Some("early")).await, 404, "not-found").await;
    app.create_product(9, 1).await;
    assert_eq!(app.restock(9, 5, Some("early")).await.status(), 200);
    assert_eq!(app.stock(9).await, 6);
}

async fn restock_input_out_of_range_is_a_422_and_changes_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 3).await;
    for quantity in [0, -1, 1_000_000_001] {
        assert_problem(
            app.restock(1, quantity, None).await,
            422,
            "validation-failed",
        )
        .await;
    }
    let long_key = "k".repeat(256);
    assert_problem(
        app.restock(1, 1, Some(&long_key)).await,
        422,
        "validation-failed",
    )
    .await;
    assert_problem(
        app.restock(1, 1, Some("   ")).await,
        422,
        "validation-failed",
    )
    .await;
    assert_eq!(
        app.restock(1, 1, Some(&"k".repeat(255))).await.status(),
        200
    );
    assert_eq!(app.stock(1).await, 4);
}

async fn concurrent_restocks_with_one_key_add_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 0).await;
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let client = app.admin.clone();
        let url = app.url("/products/1/restock");
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(url)
                .header("Idempotency-Key", "burst")
                .json(&serde_json::json!({"quantity": 5}))
                .send()
                .await
                .expect("POST restock");
            (
                response.status().as_u16(),
                response.bytes().await.expect("body"),
            )
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("the task finishes"));
    }
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "{answers:?}"
    );
    assert!(answers.windows(2).all(|w| w[0].1 == w[1].1));
    assert_eq!(app.stock(1).await, 5);
}

async fn a_shipment_as_large_as_a_products_first_stock_is_one_restock(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 0).await;
    assert_eq!(app.restock(1, 1_000_000_000, None).await.status(), 200);
    assert_eq!(app.stock(1).await, 1_000_000_000);
}
