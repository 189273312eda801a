//! The order status machine: `PENDING -> CONFIRMED | REJECTED | CANCELLED`, `CONFIRMED -> CANCELLED`.

use serde::{Deserialize, Serialize};
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
    }
}
