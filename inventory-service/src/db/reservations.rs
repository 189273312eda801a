//! `reservations`: what inventory did with each order's stock.

use chrono::{DateTime, Utc};
use shared::events::{LineItem, RejectionReason};
use shared::ids::OrderId;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReservationState {
    /// Stock deducted.
    Applied,
    /// Nothing deducted: unknown product or short stock.
    Rejected,
    /// Deducted, then given back after the order's cancellation.
    Released,
    /// The cancellation came first: nothing was or will be deducted.
    Cancelled,
}

impl ReservationState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "APPLIED",
            Self::Rejected => "REJECTED",
            Self::Released => "RELEASED",
            Self::Cancelled => "CANCELLED",
        }
    }

    fn parse(raw: &str) -> Self {
        match raw {
            "APPLIED" => Self::Applied,
            "REJECTED" => Self::Rejected,
            "RELEASED" => Self::Released,
            // The CHECK constraint admits nothing else.
            _ => Self::Cancelled,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Reservation {
    pub order_id: OrderId,
    pub state: ReservationState,
    pub items: Vec<LineItem>,
    pub rejection_reason: Option<RejectionReason>,
    pub updated_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct Row {
    order_id: Uuid,
    state: String,
    items: Json<Vec<LineItem>>,
    rejection_reason: Option<String>,
    updated_at: DateTime<Utc>,
}

impl From<Row> for Reservation {
    fn from(row: Row) -> Self {
        Self {
            order_id: OrderId(row.order_id),
            state: ReservationState::parse(&row.state),
            items: row.items.0,
            rejection_reason: match row.rejection_reason.as_deref() {
                Some("insufficient_stock") => Some(RejectionReason::InsufficientStock),
                Some("unknown_product") => Some(RejectionReason::UnknownProduct),
                _ => None,
            },
            updated_at: row.updated_at,
        }
    }
}

/// The primary key on the order id: one reservation (or tombstone) per order.
pub const KEY: &str = "reservations_pkey";

/// Serialises every handler of one order for the rest of the transaction, so a creation and a
/// cancellation of the same order never interleave (whichever comes second sees the first).
pub async fn lock_order(conn: &mut PgConnection, order_id: OrderId) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))")
        .bind(order_id.0)
        .execute(conn)
        .await
        .map(drop)
}

pub async fn find(conn: &mut PgConnection, order_id: OrderId) -> sqlx::Result<Option<Reservation>> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT order_id, state, items, rejection_reason, updated_at FROM reservations WHERE order_id = $1",
    )
    .bind(order_id.0)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Reservation::from))
}

pub async fn insert(
    conn: &mut PgConnection,
    order_id: OrderId,
    state: ReservationState,
    items: &[LineItem],
    rejection_reason: Option<RejectionReason>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO reservations (order_id, state, items, rejection_reason) VALUES ($1, $2, $3, $4)",
    )
    .bind(order_id.0)
    .bind(state.as_str())
    .bind(Json(items))
    .bind(rejection_reason.map(RejectionReason::as_str))
    .execute(conn)
    .await
    .map(drop)
}

pub async fn set_state(
    conn: &mut PgConnection,
    order_id: OrderId,
    state: ReservationState,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE reservations SET state = $2, updated_at = now() WHERE order_id = $1")
        .bind(order_id.0)
        .bind(state.as_str())
        .execute(conn)
        .await
        .map(drop)
}
