//! The order status machine: `PENDING -> CONFIRMED | REJECTED | CANCELLED`, `CONFIRMED -> CANCELLED`.

use serde::{Deserialize, Serialize};
use shared::events::RejectionReason;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    Pending,
    Confirmed,
    Rejected,
    Cancelled,
}

impl OrderStatus {
    pub const ALL: [Self; 4] = [
        Self::Pending,
        Self::Confirmed,
        Self::Rejected,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Confirmed => "CONFIRMED",
            Self::Rejected => "REJECTED",
            Self::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Reads a stored or sent status strictly: an unknown value is an error, never a default.
    pub fn read(raw: &str) -> Result<Self, UnknownStatus> {
        Self::parse(raw).ok_or_else(|| UnknownStatus(raw.to_owned()))
    }

    /// Whether the machine allows going from `self` to `to`.
    pub fn can_become(self, to: Self) -> bool {
        matches!(
            (self, to),
            (
                Self::Pending,
                Self::Confirmed | Self::Rejected | Self::Cancelled
            ) | (Self::Confirmed, Self::Cancelled)
        )
    }
}

/// A status text that is none of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown order status {0:?}")]
pub struct UnknownStatus(pub String);

/// Reads a stored rejection reason strictly (see [`OrderStatus::read`]).
pub fn read_rejection_reason(raw: &str) -> Result<RejectionReason, UnknownStatus> {
    RejectionReason::parse(raw).ok_or_else(|| UnknownStatus(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::OrderStatus::*;
    use super::*;

    #[test]
    fn only_the_listed_transitions_are_allowed() {
        let allowed = [
            (Pending, Confirmed),
            (Pending, Rejected),
            (Pending, Cancelled),
            (Confirmed, Cancelled),
        ];
        for from in OrderStatus::ALL {
            for to in OrderStatus::ALL {
                assert_eq!(
                    from.can_become(to),
                    allowed.contains(&(from, to)),
                    "{from:?} -> {to:?}"
                );
            }
        }
        assert_eq!(OrderStatus::parse("CANCELLED"), Some(Cancelled));
        assert_eq!(OrderStatus::parse("cancelled"), None);
        assert_eq!(OrderStatus::read("CONFIRMED"), Ok(Confirmed));
        assert!(OrderStatus::read("SHIPPED").is_err());
        assert_eq!(
            read_rejection_reason("unknown_product"),
            Ok(RejectionReason::UnknownProduct)
        );
        assert!(read_rejection_reason("out_of_stock").is_err());
    }
}
