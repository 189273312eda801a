//! The order status machine (docs/contract.md §3.1, §3.1.1):
//! `PENDING -> AWAITING_PAYMENT | CONFIRMED | REJECTED | CANCELLED`,
//! `AWAITING_PAYMENT -> CONFIRMED | EXPIRED | CANCELLED`, `CONFIRMED -> CANCELLED`.
//! `PENDING -> CONFIRMED` is the way with the payment window off, `PENDING -> AWAITING_PAYMENT`
//! the way with it on.

use serde::{Deserialize, Serialize};
use shared::events::RejectionReason;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    Pending,
    /// Stock reserved; waits for `POST /orders/{order_id}/confirm` until `payment_due_at`.
    AwaitingPayment,
    Confirmed,
    Rejected,
    Cancelled,
    /// Not confirmed by `payment_due_at`: its stock was given back.
    Expired,
}

impl OrderStatus {
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::AwaitingPayment,
        Self::Confirmed,
        Self::Rejected,
        Self::Cancelled,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::AwaitingPayment => "AWAITING_PAYMENT",
            Self::Confirmed => "CONFIRMED",
            Self::Rejected => "REJECTED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
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
                Self::AwaitingPayment | Self::Confirmed | Self::Rejected | Self::Cancelled
            ) | (
                Self::AwaitingPayment,
                Self::Confirmed | Self::Expired | Self::Cancelled
            ) | (Self::Confirmed, Self::Cancelled)
        )
    }

    /// Whether the order has settled (docs/contract.md §4.3, invariant 3): `order_end_to_end_seconds`
    /// ends at the first such status. `CONFIRMED` counts although a cancel may still follow;
    /// `AWAITING_PAYMENT` does not, since the customer still has to act.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Pending | Self::AwaitingPayment)
    }

    /// Whether inventory was asked to give the order's stock back (the saga's compensation).
    pub fn gave_back(self) -> bool {
        matches!(self, Self::Cancelled | Self::Expired)
    }
}

/// A status text that is none of the known ones.
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
            (Pending, AwaitingPayment),
            (Pending, Confirmed),
            (Pending, Rejected),
            (Pending, Cancelled),
            (AwaitingPayment, Confirmed),
            (AwaitingPayment, Expired),
            (AwaitingPayment, Cancelled),
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
        assert_eq!(
            OrderStatus::parse("AWAITING_PAYMENT"),
            Some(AwaitingPayment)
        );
        assert_eq!(OrderStatus::parse("cancelled"), None);
        assert_eq!(OrderStatus::read("CONFIRMED"), Ok(Confirmed));
        assert!(OrderStatus::read("SHIPPED").is_err());
        assert_eq!(
            read_rejection_reason("unknown_product"),
            Ok(RejectionReason::UnknownProduct)
        );
        assert!(read_rejection_reason("out_of_stock").is_err());
    }

    #[test]
    fn an_order_waiting_for_its_payment_has_not_settled_and_only_endings_give_stock_back() {
        let terminal: Vec<_> = OrderStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, [Confirmed, Rejected, Cancelled, Expired]);
        for status in OrderStatus::ALL {
            assert_eq!(status.gave_back(), [Cancelled, Expired].contains(&status));
            // Nothing leaves a status that gave the stock back.
            assert!(
                !status.gave_back() || OrderStatus::ALL.iter().all(|&to| !status.can_become(to))
            );
        }
    }
}
