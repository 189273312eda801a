//! Every row and rule of §3.4, one hold at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use testkit::{Backend, eventually};

use super::{assert_stock_adds_up, hold_body};
use crate::helpers::{TestApp, assert_problem, assert_replayed};

testkit::on_each_backend!(
    a_try_holds_every_item_until_its_deadline_and_a_read_shows_it,
    a_try_without_a_ttl_lasts_hold_ttl_secs,
    a_repeated_try_replays_its_first_outcome_and_another_body_is_refused,
    a_refused_try_holds_nothing_and_replays_its_refusal_even_after_a_restock,
    a_confirm_sells_the_units_once_and_a_cancel_after_it_is_refused,
    a_cancel_gives_the_units_back_once_and_a_confirm_after_it_is_refused,
    a_cancel_before_its_try_leaves_a_tombstone_that_refuses_the_try,
    past_its_deadline_the_clock_refuses_a_confirm_before_any_sweep_and_a_cancel_expires_it,
    a_hold_left_alone_expires_within_seconds_and_its_units_return_once,
    unknown_holds_are_404_and_bad_input_is_refused_changing_nothing,
    a_hold_and_a_deduction_may_share_an_id,
    hold_metrics_are_exposed_from_start,
    finished_holds_and_tombstones_are_kept_for_the_retention_period_and_never_under_a_day,
);

/// An instance whose expiry sweep does not run during the test: what a confirm or cancel
/// decides past a deadline is then the clock's doing alone.
async fn without_sweep(backend: Backend) -> TestApp {
    TestApp::spawn_on(backend, |c| {
        c.hold_expiry_interval = Duration::from_secs(60)
    })
    .await
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .expect("a timestamp")
        .parse()
        .expect("RFC 3339")
}

/// Asserts that `again` is a 201 replay of the first try's body `first`, byte for byte.
async fn assert_replays(again: reqwest::Response, first: &[u8]) {
    assert_eq!(again.status(), 201);
    assert_replayed(&again);
    assert_eq!(again.bytes().await.expect("body"), first);
}

async fn a_try_holds_every_item_until_its_deadline_and_a_read_shows_it(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    let response = app.hold("h-1", &[(2, 4), (1, 3)], Some(600)).await;
    assert_eq!(response.status(), 201);
    let hold: Value = response.json().await.expect("a hold");
    assert_eq!(hold["hold_id"], "h-1");
    assert_eq!(hold["state"], "HELD");
    assert_eq!(
        hold["items"],
        json!([{"product_id": 1, "quantity": 3}, {"product_id": 2, "quantity": 4}])
    );
    let lasts = time(&hold["expires_at"]) - time(&hold["created_at"]);
    assert_eq!(lasts.num_seconds(), 600);
    assert_eq!(app.stock_and_held(1).await, (7, 3));
    assert_eq!(app.stock_and_held(2).await, (6, 4));

    let read = app.read_hold("h-1").await;
    assert_eq!(read.status(), 200);
    assert_eq!(read.json::<Value>().await.expect("a hold"), hold);
    for product in [1, 2] {
        assert_stock_adds_up(&app, product, 10).await;
    }
}

async fn a_try_without_a_ttl_lasts_hold_ttl_secs(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| c.hold_ttl_secs = 120).await;
    app.create_product(1, 10).await;
    let hold: Value = app
        .hold("h-1", &[(1, 1)], None)
        .await
        .json()
        .await
        .expect("json");
    let lasts = time(&hold["expires_at"]) - time(&hold["created_at"]);
    assert_eq!(lasts.num_seconds(), 120);
}

async fn a_repeated_try_replays_its_first_outcome_and_another_body_is_refused(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    let first = app.hold("h-1", &[(1, 3)], Some(60)).await;
    assert_eq!(first.status(), 201);
    let first = first.bytes().await.expect("body");
    assert_replays(app.hold("h-1", &[(1, 3)], Some(60)).await, &first).await;
    assert_eq!(app.stock_and_held(1).await, (7, 3), "held once");

    let other_items = app.hold("h-1", &[(1, 4)], Some(60)).await;
    assert_problem(other_items, 422, "idempotency-key-reused").await;
    let other_ttl = app.hold("h-1", &[(1, 3)], Some(61)).await;
    assert_problem(other_ttl, 422, "idempotency-key-reused").await;

    // Confirmed since, the try still answers what it first did.
    assert_eq!(app.end_hold("h-1", "confirm").await.status(), 200);
    assert_replays(app.hold("h-1", &[(1, 3)], Some(60)).await, &first).await;
    assert_eq!(app.stock_and_held(1).await, (7, 0));
}

async fn a_refused_try_holds_nothing_and_replays_its_refusal_even_after_a_restock(
    backend: Backend,
) {
    let app = without_sweep(backend).await;
    app.create_product(1, 2).await;
    app.create_product(2, 10).await;
    let short = app.hold("h-short", &[(1, 3), (2, 1)], Some(60)).await;
    let body = assert_problem(short, 409, "insufficient-stock").await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("nothing was held")
    );
    let unknown = app.hold("h-unknown", &[(99, 1), (2, 1)], Some(60)).await;
    assert_problem(unknown, 404, "unknown-product").await;
    assert_eq!(app.stock_and_held(1).await, (2, 0));
    assert_eq!(app.stock_and_held(2).await, (10, 0), "all or nothing");

    assert_eq!(app.restock(1, 10, None).await.status(), 200);
    let again = app.hold("h-short", &[(1, 3), (2, 1)], Some(60)).await;
    assert_eq!(again.status(), 409);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(app.stock_and_held(1).await, (12, 0));
    // A refusal holds nothing, so there is no hold to read or confirm; a cancel of it answers
    // that nothing is held, and the try still replays its refusal.
    assert_problem(app.read_hold("h-short").await, 404, "not-found").await;
    assert_problem(app.end_hold("h-short", "confirm").await, 404, "not-found").await;
    let cancelled = app.ended_hold("h-short", "cancel").await;
    assert_eq!(
        (cancelled["state"].clone(), cancelled["items"].clone()),
        (json!("CANCELLED"), json!([]))
    );
    let still = app.hold("h-short", &[(1, 3), (2, 1)], Some(60)).await;
    assert_problem(still, 409, "insufficient-stock").await;
}

async fn a_confirm_sells_the_units_once_and_a_cancel_after_it_is_refused(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    assert_eq!(app.hold("h-1", &[(1, 3)], Some(60)).await.status(), 201);
    let confirmed = app.end_hold("h-1", "confirm").await;
    assert_eq!(confirmed.status(), 200);
    let confirmed: Value = confirmed.json().await.expect("a hold");
    assert_eq!(confirmed["state"], "CONFIRMED");
    assert_eq!(
        app.stock_and_held(1).await,
        (7, 0),
        "out of held, not back in stock"
    );

    let again = app.ended_hold("h-1", "confirm").await;
    assert_eq!(again, confirmed, "confirming again returns the same");
    assert_problem(app.end_hold("h-1", "cancel").await, 409, "hold-confirmed").await;
    assert_eq!(app.stock_and_held(1).await, (7, 0));
    assert_stock_adds_up(&app, 1, 10).await;
}

async fn a_cancel_gives_the_units_back_once_and_a_confirm_after_it_is_refused(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    app.create_product(2, 10).await;
    assert_eq!(
        app.hold("h-1", &[(1, 3), (2, 2)], Some(60)).await.status(),
        201
    );
    let cancelled = app.ended_hold("h-1", "cancel").await;
    assert_eq!(cancelled["state"], "CANCELLED");
    assert_eq!(cancelled["items"].as_array().map(Vec::len), Some(2));
    let again = app.ended_hold("h-1", "cancel").await;
    assert_eq!(again, cancelled);
    assert_eq!(app.stock_and_held(1).await, (10, 0), "back once");
    assert_eq!(app.stock_and_held(2).await, (10, 0));
    assert_problem(app.end_hold("h-1", "confirm").await, 409, "hold-cancelled").await;
    assert_stock_adds_up(&app, 1, 10).await;
}

async fn a_cancel_before_its_try_leaves_a_tombstone_that_refuses_the_try(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    let tombstone = app.end_hold("late", "cancel").await;
    assert_eq!(tombstone.status(), 200);
    let tombstone: Value = tombstone.json().await.expect("json");
    assert_eq!(tombstone["state"], "CANCELLED");
    assert_eq!(tombstone["items"], json!([]));
    assert_eq!(tombstone["expires_at"], Value::Null);
    let read: Value = app.read_hold("late").await.json().await.expect("json");
    assert_eq!(read, tombstone);

    for _ in 0..2 {
        let late = app.hold("late", &[(1, 3)], Some(60)).await;
        assert_problem(late, 409, "hold-cancelled").await;
    }
    assert_eq!(
        app.stock_and_held(1).await,
        (10, 0),
        "the late try holds nothing"
    );
    assert_problem(app.end_hold("late", "confirm").await, 409, "hold-cancelled").await;
    let again = app.ended_hold("late", "cancel").await;
    assert_eq!(again, tombstone);
}

async fn past_its_deadline_the_clock_refuses_a_confirm_before_any_sweep_and_a_cancel_expires_it(
    backend: Backend,
) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    assert_eq!(app.hold("h-1", &[(1, 3)], Some(60)).await.status(), 201);
    app.make_due("h-1").await;
    assert_problem(app.end_hold("h-1", "confirm").await, 409, "hold-expired").await;
    let read = "SELECT state FROM holds WHERE hold_id = 'h-1'";
    let state: String = app.database.scalar(read, read).await;
    assert_eq!(state, "HELD", "no sweep ran: the refusal was the clock's");
    assert_eq!(app.stock_and_held(1).await, (7, 3));

    let cancelled = app.ended_hold("h-1", "cancel").await;
    assert_eq!(
        cancelled["state"], "EXPIRED",
        "a cancel past the deadline expires it"
    );
    assert_eq!(app.stock_and_held(1).await, (10, 0));
    let again = app.ended_hold("h-1", "cancel").await;
    assert_eq!(again["state"], "EXPIRED");
    assert_problem(app.end_hold("h-1", "confirm").await, 409, "hold-expired").await;
    assert_eq!(app.stock_and_held(1).await, (10, 0), "back once");
}

async fn a_hold_left_alone_expires_within_seconds_and_its_units_return_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| {
        c.hold_expiry_interval = Duration::from_millis(100)
    })
    .await;
    app.create_product(1, 10).await;
    assert_eq!(app.hold("h-1", &[(1, 4)], Some(1)).await.status(), 201);
    assert_eq!(app.hold("h-2", &[(1, 1)], Some(600)).await.status(), 201);
    let expired = eventually(Duration::from_secs(15), || async {
        let hold: Value = app.read_hold("h-1").await.json().await.ok()?;
        (hold["state"] == "EXPIRED").then_some(hold)
    })
    .await;
    assert_eq!(expired["items"], json!([{"product_id": 1, "quantity": 4}]));
    assert_eq!(
        app.stock_and_held(1).await,
        (9, 1),
        "h-1 back, h-2 still held"
    );
    assert_stock_adds_up(&app, 1, 10).await;
}

async fn unknown_holds_are_404_and_bad_input_is_refused_changing_nothing(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    assert_problem(app.read_hold("nobody").await, 404, "not-found").await;
    assert_problem(app.end_hold("nobody", "confirm").await, 404, "not-found").await;

    let too_long = "h".repeat(129);
    let bodies = [
        hold_body("h-1", &[(1, 1)], Some(0)),
        hold_body("h-1", &[(1, 1)], Some(86_401)),
        hold_body(&too_long, &[(1, 1)], Some(60)),
        hold_body("h\u{7}1", &[(1, 1)], Some(60)),
        hold_body("h-1", &[], Some(60)),
        hold_body("h-1", &[(1, 0)], Some(60)),
        hold_body("h-1", &[(1, 1), (1, 2)], Some(60)),
        json!({"hold_id": "h-1", "items": [{"product_id": 1, "quantity": 1}], "ttl_secs": 1.5}),
        json!({"hold_id": "h-1", "items": [{"product_id": 1, "quantity": 1}], "state": "HELD"}),
    ];
    for body in bodies {
        let response = app
            .admin
            .post(app.url("/holds"))
            .json(&body)
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 422, "{body}");
    }
    assert_problem(
        app.end_hold(&too_long, "cancel").await,
        422,
        "validation-failed",
    )
    .await;
    let anonymous = app
        .anonymous
        .post(app.url("/holds"))
        .json(&hold_body("h-1", &[(1, 1)], None));
    assert_problem(anonymous.send().await.expect("POST"), 401, "unauthorized").await;
    let anonymous_read = app
        .anonymous
        .get(app.url("/holds/h-1"))
        .send()
        .await
        .expect("GET");
    assert_eq!(anonymous_read.status(), 401);
    assert_eq!(app.stock_and_held(1).await, (10, 0));
    let rows = app.database.count("SELECT count(*) FROM holds").await;
    assert_eq!(rows, 0, "nothing recorded");
}

async fn a_hold_and_a_deduction_may_share_an_id(backend: Backend) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    assert_eq!(app.deduct("same", &[(1, 2)]).await.status(), 200);
    assert_eq!(app.hold("same", &[(1, 3)], Some(60)).await.status(), 201);
    assert_eq!(app.stock_and_held(1).await, (5, 3));
    assert_stock_adds_up(&app, 1, 10).await;
}

async fn hold_metrics_are_exposed_from_start(backend: Backend) {
    let app = without_sweep(backend).await;
    let metrics = app.metrics().await;
    for series in [
        r#"hold_transitions_total{to="HELD"}"#,
        r#"hold_transitions_total{to="CONFIRMED"}"#,
        r#"hold_transitions_total{to="CANCELLED"}"#,
        r#"hold_transitions_total{to="EXPIRED"}"#,
        r#"holds_refused_total{reason="insufficient_stock"}"#,
        r#"holds_refused_total{reason="unknown_product"}"#,
        r#"holds_refused_total{reason="cancelled"}"#,
        "holds_overdue",
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
}

async fn finished_holds_and_tombstones_are_kept_for_the_retention_period_and_never_under_a_day(
    backend: Backend,
) {
    let app = without_sweep(backend).await;
    app.create_product(1, 10).await;
    for id in ["old-confirmed", "recent-confirmed", "old-held"] {
        assert_eq!(app.hold(id, &[(1, 1)], Some(600)).await.status(), 201);
    }
    for id in ["old-confirmed", "recent-confirmed"] {
        assert_eq!(app.end_hold(id, "confirm").await.status(), 200);
    }
    assert_eq!(app.end_hold("old-tombstone", "cancel").await.status(), 200);
    for (hours, ids) in [
        (25, "'old-confirmed', 'old-held', 'old-tombstone'"),
        (2, "'recent-confirmed'"),
    ] {
        app.database
            .execute(
                &format!(
                    "UPDATE holds SET updated_at = now() - interval '{hours} hours' \
                     WHERE hold_id IN ({ids})"
                ),
                &format!(
                    "UPDATE holds SET updated_at = CURRENT_TIMESTAMP(6) - INTERVAL {hours} HOUR \
                     WHERE hold_id IN ({ids})"
                ),
            )
            .await;
    }
    let stop = tokio_util::sync::CancellationToken::new();
    // A retention of a second is raised to a day.
    inventory_service::holds::expiry::delete_finished(
        &app.database.database(),
        Duration::from_secs(1),
        &stop,
    )
    .await
    .expect("retention");
    let kept = "SELECT count(*) FROM holds WHERE hold_id IN ('old-held', 'recent-confirmed')";
    assert_eq!(
        (
            app.database.count("SELECT count(*) FROM holds").await,
            app.database.count(kept).await
        ),
        (2, 2),
        "a HELD hold is never deleted"
    );
}
