//! `POST /deductions`: outcomes, all or nothing, and replays by deduction id.

use serde_json::Value;
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem, assert_replayed, assert_replays};

testkit::on_each_backend!(
    an_applied_deduction_answers_its_items_and_lowers_the_stock,
    a_repeated_deduction_id_with_the_same_items_replays_the_first_body_and_deducts_nothing,
    items_in_another_order_are_the_same_items,
    a_refused_deduction_replays_its_409_even_after_a_restock,
    an_unknown_product_is_a_404_that_replays_even_once_the_product_exists,
    a_deduction_id_reused_with_other_items_is_refused_and_deducts_nothing,
    a_multi_item_deduction_is_all_or_nothing,
    ids_and_idempotency_keys_compare_byte_by_byte,
);

async fn version(app: &TestApp, product: i64) -> i64 {
    app.product(product).await["version"]
        .as_i64()
        .expect("version is a number")
}

async fn an_applied_deduction_answers_its_items_and_lowers_the_stock(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    let response = app.deduct("order-1", &[(2, 4), (1, 3)]).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotent-replayed").is_none());
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        serde_json::json!({"deduction_id": "order-1", "status": "APPLIED", "items": [
            {"product_id": 1, "quantity": 3}, {"product_id": 2, "quantity": 4}
        ]})
    );
    assert_eq!((app.stock(1).await, app.stock(2).await), (7, 6));
}

async fn a_repeated_deduction_id_with_the_same_items_replays_the_first_body_and_deducts_nothing(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    let first = app.deduct("d-1", &[(1, 3)]).await;
    assert_eq!(first.status(), 200);
    let first = first.bytes().await.expect("body");

    assert_replays(app.deduct("d-1", &[(1, 3)]).await, &first).await;
    assert_eq!(app.stock(1).await, 7);
}

async fn items_in_another_order_are_the_same_items(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    let first = app
        .deduct("d-1", &[(1, 1), (2, 2)])
        .await
        .bytes()
        .await
        .expect("body");
    let again = app.deduct("d-1", &[(2, 2), (1, 1)]).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.bytes().await.expect("body"), first);
    assert_eq!((app.stock(1).await, app.stock(2).await), (9, 8));
}

async fn a_refused_deduction_replays_its_409_even_after_a_restock(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 1).await;
    let first = app.deduct("d-short", &[(1, 5)]).await;
    let first = assert_problem(first, 409, "insufficient-stock").await;

    assert_eq!(app.restock(1, 10, None).await.status(), 200);
    let again = app.deduct("d-short", &[(1, 5)]).await;
    assert_replayed(&again);
    assert_eq!(
        assert_problem(again, 409, "insufficient-stock").await,
        first
    );
    assert_eq!(app.stock(1).await, 11);
}

async fn an_unknown_product_is_a_404_that_replays_even_once_the_product_exists(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let first = assert_problem(
        app.deduct("d-ghost", &[(42, 1)]).await,
        404,
        "unknown-product",
    )
    .await;
    app.create_product(42, 5).await;
    let again = assert_problem(
        app.deduct("d-ghost", &[(42, 1)]).await,
        404,
        "unknown-product",
    )
    .await;
    assert_eq!(again, first);
    assert_eq!(app.stock(42).await, 5);
}

async fn a_deduction_id_reused_with_other_items_is_refused_and_deducts_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    assert_eq!(app.deduct("d-1", &[(1, 1)]).await.status(), 200);
    for items in [&[(1, 2)][..], &[(2, 1)][..], &[(1, 1), (2, 1)][..]] {
        let response = app.deduct("d-1", items).await;
        assert_problem(response, 422, "idempotency-key-reused").await;
    }
    assert_eq!((app.stock(1).await, app.stock(2).await), (9, 10));
    assert_eq!(app.deduction_rows().await, 1);
}

async fn a_multi_item_deduction_is_all_or_nothing(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 5).await;
    app.create_product(2, 1).await;
    let versions = (version(&app, 1).await, version(&app, 2).await);

    // Product 1 could be deducted, product 2 cannot: neither is.
    assert_problem(
        app.deduct("short", &[(1, 2), (2, 3)]).await,
        409,
        "insufficient-stock",
    )
    .await;
    // Product 1 could be deducted, product 3 does not exist: neither is.
    assert_problem(
        app.deduct("ghost", &[(1, 2), (3, 1)]).await,
        404,
        "unknown-product",
    )
    .await;
    assert_eq!((app.stock(1).await, app.stock(2).await), (5, 1));
    assert_eq!((version(&app, 1).await, version(&app, 2).await), versions);

    assert_eq!(app.deduct("fits", &[(1, 2), (2, 1)]).await.status(), 200);
    assert_eq!((app.stock(1).await, app.stock(2).await), (3, 0));
    // Each outcome, applied or not, was recorded once.
    assert_eq!(app.deduction_rows().await, 3);
}

/// Ids and keys are case-sensitive on both backends (MySQL's schema names a binary collation
/// where its default would fold case): another case is another deduction, hold or restock.
async fn ids_and_idempotency_keys_compare_byte_by_byte(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    app.create_product(1, 10).await;
    assert_eq!(app.deduct("d-1", &[(1, 1)]).await.status(), 200);
    let other = app.deduct("D-1", &[(1, 1)]).await;
    assert_eq!(other.status(), 200);
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.restock(1, 5, Some("k-1")).await.status(), 200);
    let other = app.restock(1, 5, Some("K-1")).await;
    assert_eq!(other.status(), 200);
    assert!(other.headers().get("idempotent-replayed").is_none());
    for hold_id in ["h-1", "H-1"] {
        let response = app.hold(hold_id, &[(1, 1)], Some(600)).await;
        assert_eq!(response.status(), 201, "{hold_id}");
        assert!(response.headers().get("idempotent-replayed").is_none());
    }
    assert_eq!(app.stock_and_held(1).await, (16, 2));
    assert_eq!(app.deduction_rows().await, 2);
    assert_eq!(app.database.count("SELECT count(*) FROM restocks").await, 2);
}
