//! What takes stock synchronously: a direct deduction (`POST /deductions`) or a hold's try
//! (`POST /holds`). Both follow the items rules (shared with orders), are named by a
//! client-chosen id, and have a canonical form that decides whether two requests are "the
//! same"; and how a stored one ended.

use sha2::{Digest, Sha256};
use shared::events::LineItem;
use shared::ids::ProductId;

use crate::input::Invalid;

pub use shared::line_items::{MAX_ITEMS, MAX_QUANTITY};
pub const MAX_DEDUCTION_ID_CHARS: usize = 128;

/// Line items that follow the order rules: 1 to 100 items, positive product ids,
/// 1 ≤ quantity ≤ 1,000,000, no product twice. Kept in canonical order (ascending product
/// id), which is also the order stock is locked and deducted in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Items(Vec<LineItem>);

impl Items {
    /// Validates `(product_id, quantity)` pairs as the client sent them.
    pub fn parse(raw: impl IntoIterator<Item = (i64, i64)>) -> Result<Self, Invalid> {
        let mut items = shared::line_items::parse(raw).map_err(|e| Invalid::new(e.to_string()))?;
        items.sort_by_key(|item| item.product_id);
        Ok(Self(items))
    }

    /// The items in ascending product id.
    pub fn as_slice(&self) -> &[LineItem] {
        &self.0
    }

    pub fn product_ids(&self) -> Vec<ProductId> {
        self.0.iter().map(|item| item.product_id).collect()
    }

    /// The canonical JSON: items in ascending product id, fixed key order, no whitespace.
    pub fn canonical_json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|item| serde_json::json!({"product_id": item.product_id.0, "quantity": item.quantity}))
            .collect()
    }

    /// sha256 (hex) of the canonical JSON: two requests carry "the same items" exactly when
    /// their fingerprints are equal, whatever order or spacing they were sent with.
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().to_string().as_bytes()))
    }
}

/// The client's name for one deduction or hold: 1 to 128 characters, not blank, no control
/// characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeductionId(String);

impl DeductionId {
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        Self::parse_field("deduction_id", raw)
    }

    /// Parses the id sent as `field` (named in the refusal).
    pub fn parse_field(field: &str, raw: &str) -> Result<Self, Invalid> {
        shared::text::check(field, raw).map_err(Invalid)?;
        let chars = raw.chars().count();
        if raw.trim().is_empty() {
            return Err(Invalid::new(format!("{field} must not be blank")));
        }
        if chars > MAX_DEDUCTION_ID_CHARS {
            return Err(Invalid::new(format!(
                "{field} must be at most {MAX_DEDUCTION_ID_CHARS} characters, got {chars}"
            )));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated `POST /deductions` or `POST /holds` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeductionRequest {
    pub id: DeductionId,
    pub items: Items,
    pub take: Take,
}

impl DeductionRequest {
    /// A direct deduction.
    pub fn sale(id: DeductionId, items: Items) -> Self {
        Self {
            id,
            items,
            take: Take::Sale,
        }
    }

    /// The fingerprint of everything that makes two requests with one id "the same": the
    /// items, and a hold's TTL.
    pub fn fingerprint(&self) -> String {
        match self.take {
            Take::Sale => self.items.fingerprint(),
            Take::Hold { ttl_secs } => {
                let body =
                    serde_json::json!({"items": self.items.canonical_json(), "ttl_secs": ttl_secs});
                hex::encode(Sha256::digest(body.to_string().as_bytes()))
            }
        }
    }
}

/// What the units a request takes become. Ids are per kind: a deduction and a hold may share
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Take {
    /// Sold for good (`POST /deductions`).
    Sale,
    /// Held for `ttl_secs` seconds, until a confirm keeps them or a cancel or the expiry gives
    /// them back (`POST /holds`).
    Hold { ttl_secs: i64 },
}

impl Take {
    /// The kind alone, as ids are scoped by it.
    pub fn kind(self) -> Kind {
        match self {
            Self::Sale => Kind::Sale,
            Self::Hold { .. } => Kind::Hold,
        }
    }
}

/// The namespace of an id: [`Take`] without its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Sale,
    Hold,
}

/// How a deduction id's first request ended, as the `deductions.status` column keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeductionStatus {
    /// Every item was deducted.
    Applied,
    /// Nothing was deducted (unknown product or short stock).
    Rejected,
}

/// A stored status this code does not know: a row it must not guess about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown deduction status {0:?}")]
pub struct UnknownStatus(pub String);

impl DeductionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::Rejected => "REJECTED",
        }
    }

    /// Reads the column strictly: anything but the two known values is an error, never a
    /// default (the CHECK constraint admits nothing else, so one means a schema drift).
    pub fn parse(raw: &str) -> Result<Self, UnknownStatus> {
        match raw {
            "APPLIED" => Ok(Self::Applied),
            "REJECTED" => Ok(Self::Rejected),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_kept_in_ascending_product_id() {
        let items = Items::parse([(3, 1), (1, 2), (2, 3)]).expect("valid");
        let ids: Vec<i64> = items.as_slice().iter().map(|i| i.product_id.0).collect();
        assert_eq!(ids, vec![1, 2, 3]);
    }

    #[test]
    fn the_fingerprint_ignores_order_but_not_content() {
        let a = Items::parse([(1, 2), (2, 3)]).expect("valid");
        let b = Items::parse([(2, 3), (1, 2)]).expect("valid");
        let c = Items::parse([(1, 2), (2, 4)]).expect("valid");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint().len(), 64);
    }

    #[test]
    fn items_that_break_the_order_rules_are_refused() {
        let too_many: Vec<(i64, i64)> = (1..=101).map(|id| (id, 1)).collect();
        let cases: Vec<Vec<(i64, i64)>> = vec![
            vec![],
            too_many,
            vec![(0, 1)],
            vec![(-1, 1)],
            vec![(1, 0)],
            vec![(1, -3)],
            vec![(1, MAX_QUANTITY + 1)],
            vec![(1, 1), (2, 1), (1, 5)],
        ];
        for case in cases {
            assert!(Items::parse(case.clone()).is_err(), "{case:?}");
        }
        let hundred: Vec<(i64, i64)> = (1..=100).map(|id| (id, MAX_QUANTITY)).collect();
        assert!(Items::parse(hundred).is_ok());
    }

    #[test]
    fn deduction_ids_are_bounded_and_not_blank() {
        assert!(DeductionId::parse("d-1").is_ok());
        assert!(DeductionId::parse(&"d".repeat(128)).is_ok());
        assert!(DeductionId::parse(&"d".repeat(129)).is_err());
        assert!(DeductionId::parse("").is_err());
        assert!(DeductionId::parse(" \t").is_err());
    }

    #[test]
    fn a_stored_status_is_read_strictly() {
        for status in [DeductionStatus::Applied, DeductionStatus::Rejected] {
            assert_eq!(DeductionStatus::parse(status.as_str()), Ok(status));
        }
        assert!(DeductionStatus::parse("applied").is_err());
        assert!(DeductionStatus::parse("").is_err());
    }
}
