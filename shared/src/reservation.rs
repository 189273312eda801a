//! What inventory did with an order's stock, as `GET /reservations/{order_id}` says it and
//! order-service's reconciliation reads it: one type on both sides of the wire.

use serde::{Deserialize, Serialize};

/// Inventory's record of an order's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReservationState {
    /// Stock deducted and still held.
    Applied,
    /// Nothing deducted: unknown product or short stock.
    Rejected,
    /// Deducted, then given back after the order's cancellation.
    Released,
    /// The cancellation came first: a tombstone, nothing was or will be deducted.
    Cancelled,
}

impl ReservationState {
    pub const ALL: [Self; 4] = [
        Self::Applied,
        Self::Rejected,
        Self::Released,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::Rejected => "REJECTED",
            Self::Released => "RELEASED",
            Self::Cancelled => "CANCELLED",
        }
    }

    /// Reads the stored or sent form strictly: `None` for anything but the four.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == raw)
    }

    /// Whether inventory holds no stock for the order, for good.
    pub fn holds_nothing(self) -> bool {
        self != Self::Applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_reads_back_as_itself_and_nothing_else_reads() {
        for state in ReservationState::ALL {
            assert_eq!(ReservationState::parse(state.as_str()), Some(state));
            let json = serde_json::to_string(&state).expect("json");
            assert_eq!(json, format!("\"{}\"", state.as_str()));
        }
        assert_eq!(ReservationState::parse("applied"), None);
        assert_eq!(ReservationState::parse(""), None);
    }
}
