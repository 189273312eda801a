//! The flash sale: many more orders than stock, all at once. Invariants 1–3 of docs/contract.md §4.3.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use testkit::Backend;

use crate::helpers::{Stack, eventually, id};

testkit::on_each_backend!(a_flash_sale_confirms_exactly_the_stock_and_settles_every_order);

async fn a_flash_sale_confirms_exactly_the_stock_and_settles_every_order(backend: Backend) {
    let stack = Stack::spawn(backend).await;
    let (stock, orders) = (100, 300);
    stack.create_product(7, stock).await;

    let placed: Vec<Value> = futures_util::stream::iter(0..orders)
        .map(|_| stack.place(json!([{"product_id": 7, "quantity": 1}])))
        .buffer_unordered(50)
        .collect()
        .await;
    let ids: Vec<String> = placed.iter().map(id).collect();

    // Invariant 3: every order reaches a terminal state within seconds.
    let statuses: Vec<String> = eventually(Duration::from_secs(60), || async {
        let mut statuses = Vec::with_capacity(ids.len());
        for order_id in &ids {
            let status = stack.order(order_id).await["status"].as_str()?.to_owned();
            if status == "PENDING" {
                return None;
            }
            statuses.push(status);
        }
        Some(statuses)
    })
    .await;
    let confirmed = statuses.iter().filter(|s| *s == "CONFIRMED").count() as i64;
    let rejected = statuses.iter().filter(|s| *s == "REJECTED").count() as i64;
    assert_eq!(confirmed, stock, "exactly the stock is sold");
    assert_eq!(rejected, orders - stock);

    // Invariants 1 and 2: initial stock − final stock = units held by confirmed orders; never negative.
    let final_stock = stack.stock(7).await;
    assert_eq!(final_stock, 0);
    assert_eq!(stock - final_stock, confirmed);
    let deducted: i64 = stack
        .inventory_db
        .scalar(
            "SELECT COALESCE(sum((item->>'quantity')::bigint), 0)::bigint \
             FROM reservations, jsonb_array_elements(items) AS item WHERE state = 'APPLIED'",
            "SELECT CAST(COALESCE(SUM(item.quantity), 0) AS SIGNED) \
             FROM reservations, JSON_TABLE(items, '$[*]' COLUMNS (quantity BIGINT PATH '$.quantity')) AS item \
             WHERE state = 'APPLIED'",
        )
        .await;
    assert_eq!(
        deducted, confirmed,
        "inventory's record agrees with the orders"
    );
}
