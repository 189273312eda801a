//! How the `POST /orders` body is documented: one of two shapes. The handler parses
//! [`crate::orders::CreateOrderRequest`], which accepts both; these types only describe them.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::orders::request::ItemRequest;

/// An order: `items` (canonical), or `product_id` + `quantity` for one item. Unknown fields
/// (a client-sent `status`, say) are refused with 422.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Read by the OpenAPI document only.
pub enum OrderBody {
    Items(ItemsOrder),
    Flat(FlatOrder),
}

/// The canonical form.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": 1, "items": [{"product_id": 1001, "quantity": 2}], "amount": 200.0}))]
#[allow(dead_code)]
pub struct ItemsOrder {
    /// Positive 64-bit integer. Required unless end-user identity is on; then it may be left
    /// out (the caller's is used) and must be the caller's.
    #[schema(minimum = 1, example = 1)]
    #[serde(default)]
    user_id: i64,
    /// 1 to 100 items, no product twice.
    #[schema(min_items = 1, max_items = 100)]
    items: Vec<ItemRequest>,
    amount: Amount,
}

/// A one-item order in the flat form.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": 1, "product_id": 1001, "quantity": 2, "amount": "200.00"}))]
#[allow(dead_code)]
pub struct FlatOrder {
    /// Positive 64-bit integer. Required unless end-user identity is on; then it may be left
    /// out (the caller's is used) and must be the caller's.
    #[schema(minimum = 1, example = 1)]
    #[serde(default)]
    user_id: i64,
    #[schema(minimum = 1, example = 1001)]
    product_id: i64,
    /// 1 to 1,000,000.
    #[schema(minimum = 1, maximum = 1_000_000, example = 2)]
    quantity: i64,
    amount: Amount,
}

/// A JSON number or a decimal string, at least 0, at most 2 decimal places.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum Amount {
    #[schema(example = 200.0)]
    Number(f64),
    #[schema(example = "200.00")]
    Text(String),
}
