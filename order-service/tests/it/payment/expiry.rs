//! The expiry: an order still waiting at its due time becomes `EXPIRED` and its stock is asked
//! back exactly once, by the loop or by a cancel that comes too late; a late reservation of an
//! expired order asks again.

use order_service::orders::payment::PaymentWindow;
use serde_json::Value;

use super::*;
use crate::helpers::assert_problem;

testkit::on_each_backend!(
    an_order_still_waiting_at_its_due_time_expires_and_its_stock_is_asked_back_once,
    a_cancel_at_or_after_the_due_time_expires_the_order_instead,
);

async fn an_order_still_waiting_at_its_due_time_expires_and_its_stock_is_asked_back_once(
    backend: Backend,
) {
    let app = app_with_window(backend, 1, Duration::from_millis(100)).await;
    let window = PaymentWindow::from_secs(1);
    let id = placed(&app).await;
    reserve(&app, &id, window).await;
    app.wait_for_status(&id, "EXPIRED").await;
    let expired = order(&app, &id).await;
    assert!(expired["payment_due_at"].is_string(), "kept: {expired}");
    // Later rounds find nothing more to do.
    let later = placed(&app).await;
    reserve(&app, &later, window).await;
    app.wait_for_status(&later, "EXPIRED").await;
    assert_eq!(releases(&app, &id).await, 1);
    assert_eq!(releases(&app, &later).await, 1);

    let response = confirm(&app, &id).await;
    assert_problem(response, 409, "not-awaiting-payment").await;
    let cancel = app.cancel(&id).await;
    assert_eq!(cancel.status(), 200);
    assert_eq!(
        cancel.json::<Value>().await.expect("json"),
        expired,
        "unchanged"
    );
    assert_eq!(releases(&app, &id).await, 1);

    // A reservation arriving late for the expired order asks for its release again (inventory
    // gives back once, whatever copies arrive).
    reserve(&app, &id, window).await;
    assert_eq!(order(&app, &id).await["status"], "EXPIRED");
    assert_eq!(releases(&app, &id).await, 2);
}

async fn a_cancel_at_or_after_the_due_time_expires_the_order_instead(backend: Backend) {
    let app = app_with_window(backend, 1, NO_EXPIRY).await;
    let id = placed(&app).await;
    reserve(&app, &id, PaymentWindow::from_secs(1)).await;
    wait_until_due(&app, &id).await;
    let cancel = app.cancel(&id).await;
    assert_eq!(cancel.status(), 200);
    let cancelled: Value = cancel.json().await.expect("json");
    assert_eq!(cancelled["status"], "EXPIRED");
    assert_eq!(releases(&app, &id).await, 1);
    let again = app.cancel(&id).await;
    assert_eq!(again.json::<Value>().await.expect("json"), cancelled);
    assert_eq!(releases(&app, &id).await, 1);
}
