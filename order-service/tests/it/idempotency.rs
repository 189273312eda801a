//! docs/contract.md §4.1: one order per token, whatever the client or Redis does.

use std::time::Duration;

use order_service::tokens::signed::{TokenSecret, TokenSigner};
use serde_json::{Value, json};
use testkit::Backend;

use crate::helpers::{TestApp, assert_problem, eventually, order_body, random_uuid, store_outcome};

testkit::on_each_backend!(
    an_issued_token_creates_one_pending_order,
    a_replayed_token_returns_the_first_response_byte_for_byte,
    the_first_response_is_cached_in_redis_after_it_is_given,
    a_token_reused_with_another_body_is_refused,
    missing_and_unknown_keys_are_refused_without_creating_anything,
    twenty_concurrent_requests_with_one_token_create_exactly_one_order,
    a_replay_after_redis_lost_every_key_returns_the_same_order,
    a_refused_request_does_not_use_up_its_token,
    an_unused_token_expires_but_a_used_one_keeps_replaying,
    issued_tokens_are_uuids_with_an_expiry,
    a_claim_left_by_a_crashed_request_goes_stale_and_the_token_works_again,
    the_same_request_while_the_first_is_in_flight_gets_409_with_retry_after,
    a_claim_that_outlived_its_committed_request_replays_the_outcome_from_the_database,
    an_issued_token_redis_forgot_before_its_use_is_accepted_once,
    tokens_redis_does_not_know_are_unknown_unless_signed_here_and_unexpired,
    a_repeat_while_redis_forgot_an_uncommitted_first_request_gets_its_outcome_not_400,
);

async fn an_issued_token_creates_one_pending_order(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let response = app.post_order(&token, &order_body(7, 1001, 2)).await;
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(response.headers().get("idempotent-replayed").is_none());
    let order: Value = response.json().await.expect("json");
    assert_eq!(
        location,
        format!("/orders/{}", order["order_id"].as_str().expect("id"))
    );
    assert_eq!(order["status"], "PENDING");
    assert_eq!(order["amount"], "10.50");
    assert_eq!(order["user_id"], 7);
    assert_eq!(order["items"], json!([{"product_id": 1001, "quantity": 2}]));
    assert_eq!(order["rejection_reason"], Value::Null);

    let fetched: Value = app.get(&location).await.json().await.expect("json");
    assert_eq!(fetched, order);
    assert_eq!(app.count("orders").await, 1);
}

async fn a_replayed_token_returns_the_first_response_byte_for_byte(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let first = app.post_order(&token, &order_body(1, 1001, 2)).await;
    let first_location = first.headers()["location"].clone();
    let first_body = first.bytes().await.expect("body");

    // Same document, other key order and whitespace.
    let reordered = r#"{ "amount": 10.5,
        "items": [{"quantity": 2, "product_id": 1001}], "user_id": 1 }"#;
    let replay = app.post_order_raw(Some(&token), reordered).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.headers()["location"], first_location);
    assert_eq!(replay.bytes().await.expect("body"), first_body);
    assert_eq!(app.count("orders").await, 1);
    assert_eq!(app.count("outbox").await, 1);
}

async fn the_first_response_is_cached_in_redis_after_it_is_given(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let first = app.post_order(&token, &order_body(1, 1001, 2)).await;
    assert_eq!(first.status(), 202);
    let order_id = first.json::<Value>().await.expect("json")["order_id"]
        .as_str()
        .expect("order_id")
        .to_owned();
    // The answer goes out first and the cache write follows it (decision 0065): replays are
    // then answered from Redis, not from the database.
    let state = app.await_cached(&token).await;
    assert!(state.contains(&order_id), "{state}");
}

async fn a_token_reused_with_another_body_is_refused(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    assert_eq!(
        app.post_order(&token, &order_body(1, 1001, 2))
            .await
            .status(),
        202
    );
    let other = app.post_order(&token, &order_body(1, 1001, 3)).await;
    assert_problem(other, 422, "idempotency-key-reused").await;
    assert_eq!(app.count("orders").await, 1);
}

async fn missing_and_unknown_keys_are_refused_without_creating_anything(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let body = order_body(1, 1001, 1).to_string();
    for key in [None, Some(""), Some("  ")] {
        assert_problem(
            app.post_order_raw(key, body.clone()).await,
            400,
            "missing-idempotency-key",
        )
        .await;
    }
    for key in [random_uuid(), "not-a-uuid".to_owned()] {
        let response = app.post_order_raw(Some(&key), body.clone()).await;
        assert_problem(response, 400, "unknown-idempotency-key").await;
    }
    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.count("outbox").await, 0);
}

async fn twenty_concurrent_requests_with_one_token_create_exactly_one_order(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let body = order_body(3, 1001, 1);
    let requests = (0..20).map(|_| app.post_order(&token, &body));
    let responses = futures_util::future::join_all(requests).await;

    let mut order_ids = std::collections::HashSet::new();
    let mut in_progress = 0;
    for response in responses {
        match response.status().as_u16() {
            202 => {
                let order: Value = response.json().await.expect("json");
                order_ids.insert(order["order_id"].as_str().expect("id").to_owned());
            }
            409 => {
                assert!(response.headers().contains_key("retry-after"));
                assert_problem(response, 409, "request-in-progress").await;
                in_progress += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(order_ids.len(), 1, "every 202 names the same order");
    assert!(in_progress < 20);
    assert_eq!(app.count("orders").await, 1);
    assert_eq!(app.count("outbox").await, 1);
}

async fn a_replay_after_redis_lost_every_key_returns_the_same_order(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let first = app.post_order(&token, &order_body(1, 1001, 2)).await;
    let first_body = first.bytes().await.expect("body");

    app.await_cached(&token).await;
    app.forget_redis().await;
    assert!(!app.redis_key_exists(&token).await);
    let replay = app.post_order(&token, &order_body(1, 1001, 2)).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.expect("body"), first_body);

    // The replay cached the outcome again, after its answer.
    app.await_cached(&token).await;
    app.forget_redis().await;
    let reused = app.post_order(&token, &order_body(1, 1001, 5)).await;
    assert_problem(reused, 422, "idempotency-key-reused").await;
    assert_eq!(app.count("orders").await, 1);
}

async fn a_refused_request_does_not_use_up_its_token(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let invalid = app.post_order(&token, &order_body(1, 1001, 0)).await;
    assert_problem(invalid, 422, "validation-failed").await;
    let broken = app.post_order_raw(Some(&token), "{\"user_id\": ").await;
    assert_problem(broken, 400, "malformed-json").await;
    assert_eq!(
        app.post_order(&token, &order_body(1, 1001, 1))
            .await
            .status(),
        202
    );
}

async fn an_unused_token_expires_but_a_used_one_keeps_replaying(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| {
        c.idempotency_token_ttl = Duration::from_secs(1)
    })
    .await;
    let unused = app.issue_token().await;
    let used = app.issue_token().await;
    let first = app.post_order(&used, &order_body(1, 1001, 1)).await;
    let first_body = first.bytes().await.expect("body");

    eventually(Duration::from_secs(10), || async {
        (!app.redis_key_exists(&unused).await && !app.redis_key_exists(&used).await).then_some(())
    })
    .await;
    let expired = app.post_order(&unused, &order_body(1, 1001, 1)).await;
    assert_problem(expired, 400, "unknown-idempotency-key").await;
    let replay = app.post_order(&used, &order_body(1, 1001, 1)).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.bytes().await.expect("body"), first_body);
    assert_eq!(app.count("orders").await, 1);
}

async fn issued_tokens_are_uuids_with_an_expiry(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let response = app
        .client
        .post(app.url("/idempotency-tokens"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.expect("json");
    assert!(uuid::Uuid::parse_str(body["token"].as_str().expect("token")).is_ok());
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().expect("expiry"))
            .expect("RFC 3339");
    let left = expires_at.signed_duration_since(chrono::Utc::now());
    assert!(left > chrono::Duration::minutes(59) && left <= chrono::Duration::minutes(60));
}

async fn a_claim_left_by_a_crashed_request_goes_stale_and_the_token_works_again(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    // What a process killed mid-request leaves behind: an in-flight claim from a minute ago.
    let stale_claim = format!(
        "inflight:somefingerprint:{}",
        chrono::Utc::now().timestamp_millis() - 60_000
    );
    app.set_token_state(&token, &stale_claim).await;
    let response = app.post_order(&token, &order_body(1, 1001, 1)).await;
    assert_eq!(response.status(), 202);

    // A fresh claim, though, still means "in progress".
    let other = app.issue_token().await;
    let fresh_claim = format!(
        "inflight:somefingerprint:{}",
        chrono::Utc::now().timestamp_millis()
    );
    app.set_token_state(&other, &fresh_claim).await;
    let busy = app.post_order(&other, &order_body(1, 1001, 1)).await;
    assert_problem(busy, 422, "idempotency-key-reused").await;
}

async fn the_same_request_while_the_first_is_in_flight_gets_409_with_retry_after(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let body = order_body(1, 1001, 1);
    // The state a first request with this body holds while it is being created.
    let fingerprint = order_service::tokens::fingerprint::of_json(&body);
    let in_flight = format!(
        "inflight:{fingerprint}:{}",
        chrono::Utc::now().timestamp_millis()
    );
    app.set_token_state(&token, &in_flight).await;

    let response = app.post_order(&token, &body).await;
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_problem(response, 409, "request-in-progress").await;
    assert_eq!(app.count("orders").await, 0);
}

async fn a_claim_that_outlived_its_committed_request_replays_the_outcome_from_the_database(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let body = order_body(1, 1001, 1);
    let first = app.post_order(&token, &body).await;
    assert_eq!(first.status(), 202);
    let first = first.text().await.expect("the first body");
    app.await_cached(&token).await;
    // What a Redis failover can leave: the promoted replica had the claim, but not the
    // outcome recorded after it.
    let fingerprint = order_service::tokens::fingerprint::of_json(&body);
    let claim = format!(
        "inflight:{fingerprint}:{}",
        chrono::Utc::now().timestamp_millis()
    );
    app.set_token_state(&token, &claim).await;

    let replay = app.post_order(&token, &body).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.expect("the replay's body"), first);
    assert_eq!(app.count("orders").await, 1);
}

/// A token of this app's own signing (its secret is in the app's database), never stored in
/// Redis: what an issued token looks like once Redis forgot it.
async fn signed_token(app: &TestApp, expires_at: chrono::DateTime<chrono::Utc>) -> String {
    let read = "SELECT secret FROM idempotency_token_secret";
    let secret: Vec<u8> = app.database.scalar(read, read).await;
    TokenSigner::new(TokenSecret::new(secret))
        .mint(expires_at, None)
        .to_string()
}

async fn a_repeat_while_redis_forgot_an_uncommitted_first_request_gets_its_outcome_not_400(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    let body = order_body(1, 1001, 2);
    let fingerprint = order_service::tokens::fingerprint::of_json(&body);
    // Request A: claimed the token, and its statement is running but not committed.
    app.set_token_state(
        &token,
        &format!(
            "inflight:{fingerprint}:{}",
            chrono::Utc::now().timestamp_millis()
        ),
    )
    .await;
    let mut a = app
        .database
        .database()
        .begin()
        .await
        .expect("A's transaction");
    let first_body = store_outcome(a.conn(), &token, &body).await;

    // Redis loses its keys; request B repeats A.
    app.forget_redis().await;
    let b = tokio::spawn({
        let (client, url, token, body) = (
            app.client.clone(),
            app.url("/orders"),
            token.clone(),
            body.to_string(),
        );
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .header("Idempotency-Key", token)
                .body(body)
                .send()
                .await
                .expect("B's request")
        }
    });
    // B claims the token again and its insert waits on A's uncommitted key (unless B was
    // answered without reaching the database: then its answer is checked below).
    eventually(Duration::from_secs(10), || async {
        let waiting = app
            .database
            .lock_waits("", "INSERT INTO idempotency_keys")
            .await;
        (waiting > 0 || b.is_finished()).then_some(())
    })
    .await;
    a.commit().await.expect("A commits");

    let b = b.await.expect("B's task");
    assert_ne!(b.status(), 400, "a token in flight is never unknown");
    assert_eq!(b.status(), 202);
    assert_eq!(b.headers()["idempotent-replayed"], "true");
    assert_eq!(b.text().await.expect("body"), first_body);
    assert_eq!(app.count("orders").await, 1);
}

async fn an_issued_token_redis_forgot_before_its_use_is_accepted_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let token = app.issue_token().await;
    app.forget_redis().await;
    let body = order_body(1, 1001, 2);
    let first = app.post_order(&token, &body).await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.bytes().await.expect("body");
    let again = app.post_order(&token, &body).await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.expect("body"), first_body);
    assert_problem(
        app.post_order(&token, &order_body(1, 1001, 3)).await,
        422,
        "idempotency-key-reused",
    )
    .await;
    assert_eq!(app.count("orders").await, 1);
}

async fn tokens_redis_does_not_know_are_unknown_unless_signed_here_and_unexpired(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let body = order_body(1, 1001, 1);
    let expired = signed_token(&app, chrono::Utc::now() - chrono::Duration::seconds(1)).await;
    let other_secret = TokenSigner::new(TokenSecret::generate())
        .mint(chrono::Utc::now() + chrono::Duration::hours(1), None)
        .to_string();
    for token in [random_uuid(), expired, other_secret] {
        assert_problem(
            app.post_order(&token, &body).await,
            400,
            "unknown-idempotency-key",
        )
        .await;
    }
    assert_eq!(app.count("orders").await, 0);
    let live = signed_token(&app, chrono::Utc::now() + chrono::Duration::hours(1)).await;
    assert_eq!(app.post_order(&live, &body).await.status(), 202);
}
