//! Stored states are read strictly: a status or rejection reason the code does not know is an
//! error, never read as some default. On either backend.

use testkit::{Backend, uuid_literal};

use crate::helpers::{TestApp, assert_problem, order_body};

testkit::on_each_backend!(an_order_with_an_unknown_stored_status_is_an_error_not_a_pending_order);

async fn an_order_with_an_unknown_stored_status_is_an_error_not_a_pending_order(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    let order = app.create_order(&order_body(1, 1001, 1)).await;
    let id = order["order_id"].as_str().expect("id").to_owned();
    // Only a schema change could store it; the test plays one (the CHECK has this name on
    // both backends).
    let unchecked = "ALTER TABLE orders DROP CONSTRAINT orders_status_known";
    app.database.execute(unchecked, unchecked).await;
    let unknown = format!(
        "UPDATE orders SET status = 'SHIPPED' WHERE order_id = {}",
        uuid_literal(backend, &id)
    );
    assert_eq!(
        app.database.execute(&unknown, &unknown).await,
        1,
        "an unknown status"
    );
    assert_problem(app.get(&format!("/orders/{id}")).await, 500, "internal").await;
    assert_problem(app.get("/orders?user_id=1").await, 500, "internal").await;
}
