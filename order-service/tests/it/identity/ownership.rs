//! The caller owns what it creates: orders in its own name, tokens only it may use (durably),
//! and nobody else's orders to read, list or cancel.

use serde_json::{Value, json};

use super::{As, my_order, secret_app};
use crate::helpers::{assert_problem, order_body};

#[tokio::test]
async fn an_order_without_user_id_is_the_callers_and_the_same_request_as_one_naming_them() {
    let app = secret_app().await;
    let alice = As::user(&app, 7);
    let key = alice.token().await;
    let first = alice.post_order(&key, &my_order(1001, 2)).await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    assert_eq!(first["user_id"], 7);
    // Naming herself is the same request: replayed, not "reused with another body".
    let named =
        json!({"user_id": 7, "items": [{"product_id": 1001, "quantity": 2}], "amount": "10.50"});
    let replay = alice.post_order(&key, &named).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(
        replay
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(replay.json::<Value>().await.expect("json"), first);
    assert_eq!(app.count("orders").await, 1);
}

#[tokio::test]
async fn naming_another_user_is_403_and_uses_up_nothing() {
    let app = secret_app().await;
    let alice = As::user(&app, 7);
    let key = alice.token().await;
    let response = alice.post_order(&key, &order_body(8, 1001, 1)).await;
    assert_problem(response, 403, "forbidden").await;
    assert_eq!(app.count("orders").await, 0);
    // The refused request did not use up the token.
    let response = alice.post_order(&key, &order_body(7, 1001, 1)).await;
    assert_eq!(response.status(), 202);
}

#[tokio::test]
async fn another_users_token_is_403_in_every_state_even_after_redis_forgot_it() {
    let app = secret_app().await;
    let (alice, mallory) = (As::user(&app, 7), As::user(&app, 8));
    let key = alice.token().await;
    let body = my_order(1001, 1);

    // Issued to Alice, unused.
    assert_problem(mallory.post_order(&key, &body).await, 403, "forbidden").await;
    // Held in flight by a request of Alice's.
    let now_ms = chrono::Utc::now().timestamp_millis();
    app.set_token_state(&key, &format!("inflight:abc@7:{now_ms}"))
        .await;
    assert_problem(mallory.post_order(&key, &body).await, 403, "forbidden").await;
    app.set_token_state(&key, "issued:7").await;

    // Used by Alice: her outcome is hers alone, in Redis and, once Redis forgot, in PostgreSQL.
    let first = alice.post_order(&key, &body).await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    assert_problem(mallory.post_order(&key, &body).await, 403, "forbidden").await;
    app.await_cached(&key).await;
    app.forget_redis().await;
    assert_problem(mallory.post_order(&key, &body).await, 403, "forbidden").await;
    let replay = alice.post_order(&key, &body).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.json::<Value>().await.expect("json"), first);
    assert_eq!(app.count("orders").await, 1);
}

#[tokio::test]
async fn a_token_redis_forgot_unused_is_still_only_its_takers() {
    let app = secret_app().await;
    let (alice, mallory) = (As::user(&app, 7), As::user(&app, 8));
    let key = alice.token().await;
    app.forget_redis().await;
    // The token proves it was issued to Alice: to anyone else it is unknown, and unspent.
    assert_problem(
        mallory.post_order(&key, &my_order(1001, 1)).await,
        400,
        "unknown-idempotency-key",
    )
    .await;
    assert_eq!(app.count("orders").await, 0);
    let response = alice.post_order(&key, &my_order(1001, 1)).await;
    assert_eq!(response.status(), 202);
}

#[tokio::test]
async fn another_users_order_is_not_found_to_read_or_to_cancel() {
    let app = secret_app().await;
    let (alice, mallory) = (As::user(&app, 7), As::user(&app, 8));
    let order = alice.order(&my_order(1001, 1)).await;
    let id = order["order_id"].as_str().expect("id");
    assert_problem(
        mallory.get(&format!("/orders/{id}")).await,
        404,
        "not-found",
    )
    .await;
    assert_problem(mallory.cancel(id).await, 404, "not-found").await;
    // Untouched: still pending, and no cancellation was sent to inventory.
    let mine: Value = alice
        .get(&format!("/orders/{id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(mine["status"], "PENDING");
    let cancellations: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE routing_key = 'order.cancelled'")
            .fetch_one(&app.db().pool)
            .await
            .expect("count");
    assert_eq!(cancellations, 0);
    // Its owner can.
    let cancelled = alice.cancel(id).await;
    assert_eq!(cancelled.status(), 200);
}

#[tokio::test]
async fn listing_shows_only_the_callers_orders_and_refuses_a_filter_naming_someone_else() {
    let app = secret_app().await;
    let (alice, bob) = (As::user(&app, 7), As::user(&app, 8));
    alice.order(&my_order(1001, 1)).await;
    alice.order(&my_order(1002, 1)).await;
    bob.order(&my_order(1001, 1)).await;

    for path in [
        "/orders",
        "/orders?user_id=7",
        "/orders?status=PENDING&limit=10",
    ] {
        let page: Value = alice.get(path).await.json().await.expect("json");
        let users: Vec<&Value> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|o| &o["user_id"])
            .collect();
        assert_eq!(users, [&json!(7), &json!(7)], "{path}");
    }
    assert_problem(alice.get("/orders?user_id=8").await, 403, "forbidden").await;
    let page: Value = bob.get("/orders").await.json().await.expect("json");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    // A bad filter is still a 422, checked before whose orders it names.
    assert_problem(
        alice.get("/orders?user_id=0").await,
        422,
        "validation-failed",
    )
    .await;
}
