//! order-service on MariaDB (docs/contract.md §2.1): what the scenarios run on each backend
//! (`testkit::on_each_backend!`) leave out. Each test has a MariaDB database of its own,
//! created by the service's start-up as it creates its own.

use std::time::Duration;

use order_service::config::Config;
use serde_json::{Value, json};
use shared::keys;
use testkit::Backend;
use tokio_util::sync::CancellationToken;

use crate::helpers::{TestApp, assert_problem, eventually, order_body};

const WAIT: Duration = Duration::from_secs(15);

/// order-service on a MariaDB database of its own, with a vhost.
async fn on_mysql() -> TestApp {
    let app = TestApp::spawn_with_broker_on(Backend::MySql, |_| {}).await;
    assert_eq!(app.database.backend(), Backend::MySql);
    app
}

async fn order_of(app: &TestApp, order_id: &str) -> Value {
    app.get(&format!("/orders/{order_id}"))
        .await
        .json()
        .await
        .expect("json")
}

async fn status_becomes(app: &TestApp, order_id: &str, status: &str) -> Value {
    eventually(WAIT, || async {
        let order = order_of(app, order_id).await;
        (order["status"] == status).then_some(order)
    })
    .await
}

fn id(order: &Value) -> String {
    order["order_id"].as_str().expect("order_id").to_owned()
}

#[tokio::test]
async fn an_order_is_placed_once_per_token_published_and_settled() {
    let app = on_mysql().await;
    let token = app.issue_token().await;
    let body = order_body(1, 1001, 2);
    let first = app.post_order(&token, &body).await;
    assert_eq!(first.status(), 202);
    let first_body = first.bytes().await.expect("body");
    let replay = app.post_order(&token, &body).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.expect("body"), first_body);
    let other = app.post_order(&token, &order_body(1, 1001, 3)).await;
    assert_problem(other, 422, "idempotency-key-reused").await;
    assert_eq!(app.count("orders").await, 1);

    let order: Value = serde_json::from_slice(&first_body).expect("json");
    let order_id = id(&order);
    let stored = order_of(&app, &order_id).await;
    assert_eq!(stored["status"], "PENDING");
    assert_eq!(stored["amount"], order["amount"], "NUMERIC kept exactly");
    assert_eq!(
        stored["created_at"], order["created_at"],
        "microseconds kept"
    );

    let probe = app.probe().await;
    let created = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    let created = created
        .first()
        .expect("order.created published by the relay");
    assert_eq!(created.routing_key, "order.created");
    assert_eq!(created.body["payload"]["order_id"], order_id.as_str());

    let reserved = json!({"order_id": order_id, "items": order["items"]});
    probe
        .publish_event(keys::INVENTORY_EXCHANGE, "inventory.reserved", reserved)
        .await;
    let confirmed = status_becomes(&app, &order_id, "CONFIRMED").await;
    assert_eq!(confirmed["rejection_reason"], Value::Null);
    eventually(WAIT, || async {
        let recorded = app.count("processed_messages").await;
        (recorded == 1).then_some(())
    })
    .await;

    let cancelled = app.cancel(&order_id).await;
    assert_eq!(cancelled.status(), 200);
    let cancelled: Value = cancelled.json().await.expect("json");
    assert_eq!(cancelled["status"], "CANCELLED");
    let released = probe
        .take(keys::INVENTORY_ORDER_EVENTS_QUEUE, 1, WAIT)
        .await;
    assert_eq!(
        released
            .first()
            .expect("order.cancelled published")
            .routing_key,
        "order.cancelled"
    );
    let again = app.cancel(&order_id).await;
    assert_eq!(
        again.status(),
        200,
        "a cancelled order is returned as it is"
    );
    assert_eq!(
        app.database
            .count("SELECT COUNT(*) FROM outbox WHERE routing_key = 'order.cancelled'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_rejection_and_a_late_duplicate_are_settled_once() {
    let app = on_mysql().await;
    let order_id = id(&app.create_order(&order_body(2, 1001, 5)).await);
    let probe = app.probe().await;
    let rejected = json!({"order_id": order_id, "reason": "insufficient_stock"});
    let (event_id, envelope) = testkit::event_envelope("inventory.rejected", rejected);
    for _ in 0..2 {
        probe
            .publish(
                keys::INVENTORY_EXCHANGE,
                "inventory.rejected",
                envelope.to_string().as_bytes(),
                Some(&event_id),
            )
            .await;
    }
    let order = status_becomes(&app, &order_id, "REJECTED").await;
    assert_eq!(order["rejection_reason"], "insufficient_stock");
    // A reservation arriving after the rejection changes nothing.
    probe
        .publish_event(
            keys::INVENTORY_EXCHANGE,
            "inventory.reserved",
            json!({"order_id": order_id, "items": [{"product_id": 1001, "quantity": 5}]}),
        )
        .await;
    eventually(WAIT, || async {
        let recorded = app.count("processed_messages").await;
        (recorded == 2).then_some(())
    })
    .await;
    assert_eq!(order_of(&app, &order_id).await["status"], "REJECTED");
}

#[tokio::test]
async fn pages_run_newest_first_and_bad_parameters_are_422() {
    let app = on_mysql().await;
    let mut placed = Vec::new();
    for _ in 0..3 {
        placed.push(id(&app.create_order(&order_body(4, 1001, 1)).await));
    }
    let mut seen = Vec::new();
    let mut path = "/orders?limit=2".to_owned();
    loop {
        let page: Value = app.get(&path).await.json().await.expect("json");
        for item in page["items"].as_array().expect("items") {
            seen.push(id(item));
        }
        match page["next"].as_str() {
            Some(cursor) => path = format!("/orders?limit=2&after={cursor}"),
            None => break,
        }
    }
    placed.reverse();
    assert_eq!(seen, placed, "newest first, every order once");
    let mine: Value = app
        .get("/orders?user_id=4&status=PENDING")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(mine["items"].as_array().expect("items").len(), 3);
    for bad in [
        "/orders?status=%00",
        "/orders?status=PENDING%00",
        "/orders?limit=0",
    ] {
        assert_problem(app.get(bad).await, 422, "validation-failed").await;
    }
    let control = app
        .post_order(
            &app.issue_token().await,
            &json!({"user_id": 4, "items": [{"product_id": 1, "quantity": 1}], "amount": "1\u{0}"}),
        )
        .await;
    assert_eq!(
        control.status(),
        422,
        "a NUL is refused before the database"
    );
    assert_eq!(app.count("orders").await, 3);
}

#[tokio::test]
async fn the_token_secret_is_shared_by_instances_on_one_database() {
    let first = on_mysql().await;
    let token = first.issue_token().await;
    // A second instance on the same database reads the stored secret: the token is its own.
    let db_url = first.database.url().to_owned();
    let second_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", second_listener.local_addr().expect("address"));
    let config = Config {
        http_addr: "127.0.0.1:0".parse().expect("address"),
        database_urls: vec![db_url],
        redis_url: testkit::redis_url(),
        redis_key_prefix: testkit::redis_prefix(),
        amqp_urls: vec![testkit::NO_BROKER.into()],
        inventory_url: "http://127.0.0.1:1".into(),
        ..Config::default()
    };
    let state = order_service::build_state(config)
        .await
        .expect("second instance");
    let stop = CancellationToken::new();
    tokio::spawn(order_service::serve(state, second_listener, stop.clone()));
    let response = reqwest::Client::new()
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", &token)
        .json(&order_body(5, 1001, 1))
        .send()
        .await
        .expect("request");
    assert_eq!(
        response.status(),
        202,
        "the other instance's token is valid here"
    );
    stop.cancel();
}
