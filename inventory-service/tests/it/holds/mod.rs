//! Holds (docs/contract.md §3.4): every rule of the try / confirm / cancel and the expiry, and
//! the races between them.

mod clock;
mod in_batch;
mod races;
mod rules;

use serde_json::{Value, json};

use crate::helpers::TestApp;

/// The body of `POST /holds`; `ttl_secs` left out when `None`.
pub fn hold_body(hold_id: &str, items: &[(i64, i64)], ttl_secs: Option<i64>) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"product_id": p, "quantity": q}))
        .collect();
    let mut body = json!({"hold_id": hold_id, "items": items});
    if let Some(ttl) = ttl_secs {
        body["ttl_secs"] = json!(ttl);
    }
    body
}

impl TestApp {
    /// `POST /holds`.
    pub async fn hold(
        &self,
        hold_id: &str,
        items: &[(i64, i64)],
        ttl: Option<i64>,
    ) -> reqwest::Response {
        self.admin
            .post(self.url("/holds"))
            .json(&hold_body(hold_id, items, ttl))
            .send()
            .await
            .expect("POST /holds")
    }

    /// `POST /holds/{hold_id}/{step}` (`confirm` or `cancel`).
    pub async fn end_hold(&self, hold_id: &str, step: &str) -> reqwest::Response {
        self.admin
            .post(self.url(&format!("/holds/{hold_id}/{step}")))
            .send()
            .await
            .expect("POST /holds/{id}/{step}")
    }

    /// [`TestApp::end_hold`] that must answer 200: the hold it returns.
    pub async fn ended_hold(&self, hold_id: &str, step: &str) -> Value {
        let response = self.end_hold(hold_id, step).await;
        assert_eq!(response.status(), 200, "{step} of {hold_id}");
        response.json().await.expect("a hold")
    }

    pub async fn read_hold(&self, hold_id: &str) -> reqwest::Response {
        self.admin
            .get(self.url(&format!("/holds/{hold_id}")))
            .send()
            .await
            .expect("GET /holds/{id}")
    }

    /// A product's `(stock, held)`.
    pub async fn stock_and_held(&self, product_id: i64) -> (i64, i64) {
        let product = self.product(product_id).await;
        let number = |field: &str| product[field].as_i64().expect("a number");
        (number("stock"), number("held"))
    }

    /// Moves every deadline of `hold_id` into the past, as if its TTL had run out.
    pub async fn make_due(&self, hold_id: &str) {
        let moved = self
            .database
            .execute(
                &format!(
                    "UPDATE holds SET expires_at = now() - interval '1 second' \
                     WHERE hold_id = '{hold_id}'"
                ),
                &format!(
                    "UPDATE holds SET expires_at = CURRENT_TIMESTAMP(6) - INTERVAL 1 SECOND \
                     WHERE hold_id = '{hold_id}'"
                ),
            )
            .await;
        assert_eq!(moved, 1, "the deadline of {hold_id} moved");
    }
}

/// The units of `product` in the items of the rows of `table` (`deductions` or `holds`) that
/// `condition` keeps.
async fn units_of(app: &TestApp, product: i64, table: &str, condition: &str) -> i64 {
    app.database
        .scalar(
            &format!(
                "SELECT coalesce(sum((i->>'quantity')::bigint), 0)::bigint \
                 FROM {table}, jsonb_array_elements(items) AS i \
                 WHERE {condition} AND (i->>'product_id')::bigint = {product}"
            ),
            &format!(
                "SELECT CAST(COALESCE(SUM(i.quantity), 0) AS SIGNED) \
                 FROM {table}, JSON_TABLE(items, '$[*]' COLUMNS ( \
                     product_id BIGINT PATH '$.product_id', quantity BIGINT PATH '$.quantity')) AS i \
                 WHERE {condition} AND i.product_id = {product}"
            ),
        )
        .await
}

/// Invariant 1 for the products of a test that only held, deducted and restocked: initial +
/// restocks − stock = applied deductions + units of holds `HELD` or `CONFIRMED`, and `held` =
/// the units of the `HELD` holds.
pub async fn assert_stock_adds_up(app: &TestApp, product: i64, initial: i64) {
    let db = &app.database;
    let stock = db
        .count(&format!(
            "SELECT stock FROM products WHERE product_id = {product}"
        ))
        .await;
    let restocked: i64 = db
        .scalar(
            &format!(
                "SELECT coalesce(sum(quantity), 0)::bigint FROM restocks \
                 WHERE product_id = {product}"
            ),
            &format!(
                "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED) FROM restocks \
                 WHERE product_id = {product}"
            ),
        )
        .await;
    let deducted = units_of(app, product, "deductions", "status = 'APPLIED'").await;
    let taken_by_holds = units_of(app, product, "holds", "state IN ('HELD', 'CONFIRMED')").await;
    let held_by_holds = units_of(app, product, "holds", "state = 'HELD'").await;
    assert!(stock >= 0, "stock never negative");
    assert_eq!(
        initial + restocked - stock,
        deducted + taken_by_holds,
        "invariant 1 for product {product}"
    );
    let (_, held) = app.stock_and_held(product).await;
    assert_eq!(held, held_by_holds, "held = units of HELD holds");
}
