//! Products: what a new product and a restock must look like, and how a product is shown.

use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::ids::ProductId;
use utoipa::ToSchema;

use crate::input::{Invalid, product_id};

pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_INITIAL_STOCK: i64 = 1_000_000_000;
pub const MAX_RESTOCK_QUANTITY: i64 = MAX_INITIAL_STOCK;
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// A product as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(example = json!({
    "product_id": 1001, "name": "Espresso beans 1 kg", "stock": 8, "held": 2, "version": 3,
    "updated_at": "2026-11-29T12:00:00Z"
}))]
pub struct Product {
    pub product_id: ProductId,
    pub name: String,
    /// Units that can still be sold; never negative.
    #[schema(minimum = 0)]
    pub stock: i64,
    /// Units frozen by holds in state `HELD`: out of `stock`, not sold yet.
    #[schema(minimum = 0)]
    pub held: i64,
    /// Bumped by every stock change.
    #[schema(minimum = 0)]
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

/// A product about to be created: positive id, a name of 1 to 200 characters that is not
/// blank (surrounding whitespace is trimmed), and 0 to 1,000,000,000 units of stock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProduct {
    pub product_id: ProductId,
    pub name: String,
    pub stock: i64,
}

impl NewProduct {
    pub fn parse(product_id_raw: i64, name: &str, stock: i64) -> Result<Self, Invalid> {
        let product_id = product_id(product_id_raw)?;
        shared::text::check("name", name).map_err(Invalid)?;
        let name = name.trim();
        let chars = name.chars().count();
        if chars == 0 {
            return Err(Invalid::new("name must not be blank"));
        }
        if chars > MAX_NAME_CHARS {
            return Err(Invalid::new(format!(
                "name must be at most {MAX_NAME_CHARS} characters, got {chars}"
            )));
        }
        if !(0..=MAX_INITIAL_STOCK).contains(&stock) {
            return Err(Invalid::new(format!(
                "stock must be between 0 and {MAX_INITIAL_STOCK}, got {stock}"
            )));
        }
        Ok(Self {
            product_id,
            name: name.to_owned(),
            stock,
        })
    }
}

/// Units to add to a product's stock: 1 to 1,000,000,000, as much as a product may start with
/// (the contract sets no maximum; this one keeps a sum far from `bigint`'s limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestockQuantity(i64);

impl RestockQuantity {
    pub fn parse(quantity: i64) -> Result<Self, Invalid> {
        if (1..=MAX_RESTOCK_QUANTITY).contains(&quantity) {
            Ok(Self(quantity))
        } else {
            Err(Invalid::new(format!(
                "quantity must be between 1 and {MAX_RESTOCK_QUANTITY}, got {quantity}"
            )))
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

/// A client-chosen `Idempotency-Key` of a restock: 1 to 255 characters, not blank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        shared::text::check("the Idempotency-Key header", raw).map_err(Invalid)?;
        let chars = raw.chars().count();
        if raw.trim().is_empty() {
            return Err(Invalid::new("the Idempotency-Key header must not be blank"));
        }
        if chars > MAX_IDEMPOTENCY_KEY_CHARS {
            return Err(Invalid::new(format!(
                "the Idempotency-Key header must be at most {MAX_IDEMPOTENCY_KEY_CHARS} characters, got {chars}"
            )));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_product_is_accepted_with_its_name_trimmed() {
        let product = NewProduct::parse(1001, "  Beans ", 0).expect("valid");
        assert_eq!(product.product_id, ProductId(1001));
        assert_eq!(product.name, "Beans");
        assert!(NewProduct::parse(1, &"é".repeat(200), MAX_INITIAL_STOCK).is_ok());
    }

    #[test]
    fn invalid_products_are_refused() {
        let long = "x".repeat(201);
        let cases: &[(i64, &str, i64)] = &[
            (0, "a", 1),
            (-5, "a", 1),
            (1, "", 1),
            (1, "   ", 1),
            (1, &long, 1),
            (1, "a", -1),
            (1, "a", MAX_INITIAL_STOCK + 1),
            (1, "nul\u{0}byte", 1),
            (1, "tab\there", 1),
            (1, "del\u{7f}", 1),
            (1, "trailing newline\n", 1),
        ];
        for (id, name, stock) in cases {
            assert!(
                NewProduct::parse(*id, name, *stock).is_err(),
                "{id} {name:?} {stock}"
            );
        }
    }

    #[test]
    fn restock_quantities_are_bounded() {
        assert!(RestockQuantity::parse(1).is_ok());
        assert!(RestockQuantity::parse(MAX_RESTOCK_QUANTITY).is_ok());
        for bad in [0, -1, MAX_RESTOCK_QUANTITY + 1] {
            assert!(RestockQuantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn idempotency_keys_are_bounded_and_not_blank() {
        assert!(IdempotencyKey::parse("k-1").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("  ").is_err());
        assert!(IdempotencyKey::parse("k\t1").is_err());
        assert!(IdempotencyKey::parse("k\u{0}").is_err());
    }
}
