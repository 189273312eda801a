//! How a hold is shown, and the states it goes through.

use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::events::LineItem;
use utoipa::ToSchema;

/// A hold as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(example = json!({
    "hold_id": "checkout-7f3a", "state": "HELD",
    "items": [{"product_id": 1001, "quantity": 2}],
    "expires_at": "2026-12-02T12:15:00Z",
    "created_at": "2026-12-02T12:00:00Z", "updated_at": "2026-12-02T12:00:00Z"
}))]
pub struct Hold {
    pub hold_id: String,
    pub state: HoldState,
    /// The units held, in ascending product id; `[]` on a tombstone (a cancel that came
    /// before its try).
    pub items: Vec<LineItem>,
    /// When a `HELD` hold stops being confirmable; `null` on a tombstone.
    #[schema(required = true)]
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `HELD` until a confirm (`CONFIRMED`), a cancel (`CANCELLED`) or the clock (`EXPIRED`)
/// ends it; each of the three is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HoldState {
    Held,
    Confirmed,
    Cancelled,
    Expired,
}

impl HoldState {
    pub const ALL: [Self; 4] = [Self::Held, Self::Confirmed, Self::Cancelled, Self::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "HELD",
            Self::Confirmed => "CONFIRMED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }

    /// Reads a stored state; `None` for a refused try (which shows no hold) and anything
    /// unknown.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}
