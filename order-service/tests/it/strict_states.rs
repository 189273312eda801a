//! Stored states are read strictly: a status or rejection reason the code does not know is an
//! error, never read as some default.

use crate::helpers::{TestApp, assert_problem, order_body};

#[tokio::test]
async fn an_order_with_an_unknown_stored_status_is_an_error_not_a_pending_order() {
    let app = TestApp::spawn().await;
    let order = app.create_order(&order_body(1, 1001, 1)).await;
    let id = order["order_id"].as_str().expect("id").to_owned();
    // Only a schema change could store it; the test plays one.
    sqlx::query("ALTER TABLE orders DROP CONSTRAINT orders_status_known")
        .execute(&app.db().pool)
        .await
        .expect("drop the check");
    sqlx::query("UPDATE orders SET status = 'SHIPPED' WHERE order_id = $1::uuid")
        .bind(&id)
        .execute(&app.db().pool)
        .await
        .expect("an unknown status");
    assert_problem(app.get(&format!("/orders/{id}")).await, 500, "internal").await;
    assert_problem(app.get("/orders?user_id=1").await, 500, "internal").await;
}
