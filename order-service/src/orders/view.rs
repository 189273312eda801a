//! The order as the API shows it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::events::{LineItem, RejectionReason};
use shared::ids::{OrderId, UserId};
use utoipa::ToSchema;

use crate::orders::queries::OrderRow;
use crate::orders::{NewOrder, OrderStatus};

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "order_id": "0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80", "user_id": 1,
    "items": [{"product_id": 1001, "quantity": 2}], "amount": "200.00", "status": "PENDING",
    "rejection_reason": null, "payment_due_at": null, "created_at": "2026-11-29T21:00:00.123456Z",
    "updated_at": "2026-11-29T21:00:00.123456Z"
}))]
pub struct Order {
    pub order_id: OrderId,
    pub user_id: UserId,
    pub items: Vec<LineItem>,
    /// Decimal string with two places.
    #[schema(example = "200.00")]
    pub amount: String,
    pub status: OrderStatus,
    /// `insufficient_stock` or `unknown_product` when `REJECTED`, else `null`.
    #[schema(example = json!(null))]
    pub rejection_reason: Option<RejectionReason>,
    /// With a payment window (`ORDER_PAYMENT_WINDOW_SECS`): when the order stops waiting for
    /// its payment, set as it becomes `AWAITING_PAYMENT` and kept after; `null` on an order
    /// that never waited.
    #[schema(example = json!(null))]
    pub payment_due_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Order {
    /// The order as `POST /orders` first answers it: `PENDING`, created now.
    pub fn placed(order_id: OrderId, order: &NewOrder, created_at: DateTime<Utc>) -> Self {
        Self {
            order_id,
            user_id: order.user_id,
            items: order.items.clone(),
            amount: format!("{:.2}", order.amount),
            status: OrderStatus::Pending,
            rejection_reason: None,
            payment_due_at: None,
            created_at,
            updated_at: created_at,
        }
    }
}

impl From<OrderRow> for Order {
    fn from(row: OrderRow) -> Self {
        Self {
            order_id: OrderId(row.order_id),
            user_id: UserId(row.user_id),
            items: row.items.0,
            amount: format!("{:.2}", row.amount),
            status: row.status,
            rejection_reason: row.rejection_reason,
            payment_due_at: row.payment_due_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}
