//! Confirming: with the window off as before, with it on before and after the due time, and
//! every status that is not waiting.

use chrono::{DateTime, Utc};
use order_service::orders::payment::PaymentWindow;
use serde_json::Value;

use super::*;
use crate::helpers::{assert_problem, random_uuid};
use crate::identity::{As, my_order, secret_identity};

testkit::on_each_backend!(
    with_the_window_off_a_reservation_confirms_at_once_and_confirm_returns_it,
    a_reserved_order_waits_the_window_then_a_confirm_confirms_it_once,
    at_or_after_the_due_time_the_clock_closes_the_window_before_any_expiry_ran,
    orders_that_are_not_waiting_are_refused_not_awaiting_payment,
    with_identity_on_only_the_owner_confirms,
);

fn time(order: &Value, field: &str) -> DateTime<Utc> {
    order[field]
        .as_str()
        .expect(field)
        .parse()
        .expect("RFC 3339")
}

async fn with_the_window_off_a_reservation_confirms_at_once_and_confirm_returns_it(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let pending = placed(&app).await;
    let response = confirm(&app, &pending).await;
    assert_eq!(
        response.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_problem(response, 409, "not-awaiting-payment").await;

    reserve(&app, &pending, PaymentWindow::OFF).await;
    let confirmed = order(&app, &pending).await;
    assert_eq!(confirmed["status"], "CONFIRMED");
    assert_eq!(confirmed["payment_due_at"], Value::Null);
    let again = confirm(&app, &pending).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.expect("json"), confirmed);
    assert_problem(confirm(&app, &random_uuid()).await, 404, "not-found").await;
}

async fn a_reserved_order_waits_the_window_then_a_confirm_confirms_it_once(backend: Backend) {
    let app = app_with_window(backend, 600, NO_EXPIRY).await;
    let id = placed(&app).await;
    reserve(&app, &id, PaymentWindow::from_secs(600)).await;
    let waiting = order(&app, &id).await;
    assert_eq!(waiting["status"], "AWAITING_PAYMENT");
    // Due the window after the moment it started to wait, by the service's clock.
    let moved_at = time(&waiting, "updated_at");
    assert_eq!(
        time(&waiting, "payment_due_at") - moved_at,
        chrono::Duration::seconds(600)
    );
    let listed: Value = app
        .get("/orders?status=AWAITING_PAYMENT")
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(listed["items"][0]["order_id"], id.as_str());

    let first = confirm(&app, &id).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.expect("json");
    assert_eq!(first["status"], "CONFIRMED");
    assert_eq!(first["payment_due_at"], waiting["payment_due_at"], "kept");
    let again = confirm(&app, &id).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.expect("json"), first);
    assert_eq!(releases(&app, &id).await, 0);

    let metrics = app.get("/metrics").await.text().await.expect("text");
    for to in ["AWAITING_PAYMENT", "EXPIRED"] {
        let label = format!("order_transitions_total{{to=\"{to}\"}}");
        assert!(metrics.contains(&label), "{label} missing from:\n{metrics}");
    }
}

async fn at_or_after_the_due_time_the_clock_closes_the_window_before_any_expiry_ran(
    backend: Backend,
) {
    let app = app_with_window(backend, 1, NO_EXPIRY).await;
    let id = placed(&app).await;
    reserve(&app, &id, PaymentWindow::from_secs(1)).await;
    wait_until_due(&app, &id).await;
    assert_problem(confirm(&app, &id).await, 409, "payment-window-closed").await;
    assert_eq!(order(&app, &id).await["status"], "AWAITING_PAYMENT");
    assert_eq!(
        releases(&app, &id).await,
        0,
        "nothing given back by a refusal"
    );
}

async fn orders_that_are_not_waiting_are_refused_not_awaiting_payment(backend: Backend) {
    let app = app_with_window(backend, 600, NO_EXPIRY).await;
    let window = PaymentWindow::from_secs(600);
    let cancelled = placed(&app).await;
    assert_eq!(app.cancel(&cancelled).await.status(), 200);
    let rejected = placed(&app).await;
    let reject = format!(
        "UPDATE orders SET status = 'REJECTED', rejection_reason = 'insufficient_stock' \
         WHERE order_id = {}",
        testkit::uuid_literal(app.database.backend(), &rejected)
    );
    assert_eq!(app.database.execute(&reject, &reject).await, 1, "rejected");
    let waiting_then_cancelled = placed(&app).await;
    reserve(&app, &waiting_then_cancelled, window).await;
    let cancel = app.cancel(&waiting_then_cancelled).await;
    assert_eq!(cancel.status(), 200);
    assert_eq!(
        cancel.json::<Value>().await.expect("json")["status"],
        "CANCELLED"
    );
    assert_eq!(
        releases(&app, &waiting_then_cancelled).await,
        1,
        "stock given back once"
    );
    for id in [&cancelled, &rejected, &waiting_then_cancelled] {
        let response = confirm(&app, id).await;
        assert!(response.headers().get("retry-after").is_none());
        assert_problem(response, 409, "not-awaiting-payment").await;
    }
    // A second cancel changes nothing and gives nothing back again.
    assert_eq!(app.cancel(&waiting_then_cancelled).await.status(), 200);
    assert_eq!(releases(&app, &waiting_then_cancelled).await, 1);
}

async fn with_identity_on_only_the_owner_confirms(backend: Backend) {
    let app = TestApp::spawn_on(backend, |c| {
        c.identity = secret_identity();
        configure(c, 600, NO_EXPIRY);
    })
    .await;
    let (alice, mallory) = (As::user(&app, 7), As::user(&app, 8));
    let order = alice.order(&my_order(1001, 1)).await;
    let id = order["order_id"].as_str().expect("id").to_owned();
    reserve(&app, &id, PaymentWindow::from_secs(600)).await;
    let confirm_as = |who: &As<'_>| {
        who.app
            .client
            .post(who.app.url(&format!("/orders/{id}/confirm")))
            .bearer_auth(&who.bearer)
            .send()
    };
    assert_problem(
        confirm_as(&mallory).await.expect("confirm"),
        404,
        "not-found",
    )
    .await;
    let mine: Value = alice
        .get(&format!("/orders/{id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(mine["status"], "AWAITING_PAYMENT", "untouched");
    let confirmed = confirm_as(&alice).await.expect("confirm");
    assert_eq!(confirmed.status(), 200);
}
