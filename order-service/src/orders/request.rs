//! The order request as clients send it, and the validated order it becomes.

use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::Value;
use shared::events::LineItem;
use shared::ids::UserId;
use utoipa::ToSchema;

use super::amount::{self, AmountInput};

/// `POST /orders` body. `items` is canonical; `product_id` + `quantity` is accepted as a
/// one-item order. Unknown fields (a client-sent `status`, say) are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": 1, "items": [{"product_id": 1001, "quantity": 2}], "amount": 200.0}))]
pub struct CreateOrderRequest {
    /// Positive 64-bit integer.
    #[schema(minimum = 1, example = 1)]
    pub user_id: i64,
    /// 1 to 100 items, no product twice.
    #[serde(default)]
    pub items: Option<Vec<ItemRequest>>,
    /// Flat form: the product of a one-item order.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub product_id: Option<i64>,
    /// Flat form: the quantity of a one-item order.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub quantity: Option<i64>,
    /// A JSON number or decimal string, at least 0, at most 2 decimal places.
    #[schema(value_type = f64, example = 200.0)]
    pub amount: AmountInput,
}

/// One requested item.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemRequest {
    #[schema(minimum = 1, example = 1001)]
    pub product_id: i64,
    #[schema(minimum = 1, maximum = 1_000_000, example = 2)]
    pub quantity: i64,
}

/// A valid order, ready to be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOrder {
    pub user_id: UserId,
    pub items: Vec<LineItem>,
    pub amount: Decimal,
}

/// With identity on, a body that leaves `user_id` out orders for the caller. It is filled in
/// before anything reads the body, so the request is the same as one naming the caller: the
/// same rules, the same idempotency fingerprint. Anything but an object is left for the
/// parser to refuse.
pub fn default_user(document: &mut Value, caller: UserId) {
    if let Value::Object(fields) = document {
        fields
            .entry("user_id")
            .or_insert_with(|| Value::from(caller.0));
    }
}

impl NewOrder {
    /// Checks every rule of the contract; the error names the first broken one.
    pub fn parse(request: CreateOrderRequest) -> Result<Self, String> {
        if request.user_id < 1 {
            return Err("user_id must be a positive integer".into());
        }
        let items = match (request.items, request.product_id, request.quantity) {
            (Some(items), None, None) => items,
            (None, Some(product_id), Some(quantity)) => vec![ItemRequest {
                product_id,
                quantity,
            }],
            (None, None, None) => return Err("items is required".into()),
            (None, _, _) => {
                return Err("the one-item form needs both product_id and quantity".into());
            }
            (Some(_), _, _) => {
                return Err("send either items or product_id and quantity, not both".into());
            }
        };
        let items = shared::line_items::parse(items.iter().map(|i| (i.product_id, i.quantity)))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            user_id: UserId(request.user_id),
            items,
            amount: amount::parse(&request.amount)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: serde_json::Value) -> Result<NewOrder, String> {
        let request: CreateOrderRequest =
            serde_json::from_value(body).map_err(|e| e.to_string())?;
        NewOrder::parse(request)
    }

    #[test]
    fn both_forms_give_the_same_order() {
        let canonical = parse(
            json!({"user_id": 1, "items": [{"product_id": 1001, "quantity": 2}], "amount": 200.0}),
        );
        let flat = parse(json!({"user_id": 1, "product_id": 1001, "quantity": 2, "amount": "200"}));
        assert_eq!(canonical, flat);
        assert!(canonical.is_ok());
    }

    #[test]
    fn a_missing_user_id_becomes_the_callers_and_a_given_one_stays() {
        let mut omitted = json!({"items": [{"product_id": 1, "quantity": 1}], "amount": 1});
        default_user(&mut omitted, UserId(7));
        assert_eq!(
            omitted,
            json!({"user_id": 7, "items": [{"product_id": 1, "quantity": 1}], "amount": 1})
        );
        let mut named = json!({"user_id": 8, "amount": 1});
        default_user(&mut named, UserId(7));
        assert_eq!(named["user_id"], 8);
        let mut not_an_object = json!([1]);
        default_user(&mut not_an_object, UserId(7));
        assert_eq!(not_an_object, json!([1]));
    }

    #[test]
    fn invalid_orders_are_refused() {
        let too_many: Vec<_> = (1..=101)
            .map(|p| json!({"product_id": p, "quantity": 1}))
            .collect();
        let cases = [
            json!({"user_id": 0, "items": [{"product_id": 1, "quantity": 1}], "amount": 1}),
            json!({"user_id": -5, "items": [{"product_id": 1, "quantity": 1}], "amount": 1}),
            json!({"user_id": 1, "items": [], "amount": 1}),
            json!({"user_id": 1, "items": too_many, "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 0, "quantity": 1}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 0}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1_000_001}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 2}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}], "amount": -1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}], "amount": 1.001}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}], "amount": 1, "status": "CONFIRMED"}),
            json!({"user_id": 1, "product_id": 1, "amount": 1}),
            json!({"user_id": 1, "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}], "product_id": 1, "quantity": 1, "amount": 1}),
            json!({"user_id": "1", "items": [{"product_id": 1, "quantity": 1}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1.5}], "amount": 1}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}], "amount": true}),
            json!({"user_id": 1, "items": [{"product_id": 1, "quantity": 1}]}),
        ];
        for body in cases {
            assert!(parse(body.clone()).is_err(), "{body}");
        }
    }
}
