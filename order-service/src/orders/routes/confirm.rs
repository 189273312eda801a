//! `POST /orders/{order_id}/confirm`: the payment was captured (docs/contract.md §3.1.1).

use axum::extract::State;
use platform::http::{Json, Path};
use shared::ids::OrderId;
use uuid::Uuid;

use super::{PROBLEM, UNAUTHORIZED};
use crate::error::ApiError;
use crate::identity::Caller;
use crate::orders::payment::confirm::{self, Confirmed};
use crate::orders::view::Order;
use crate::state::AppState;

/// Confirm an order once its payment is captured
///
/// An `AWAITING_PAYMENT` order becomes `CONFIRMED` if the confirm comes before its
/// `payment_due_at` (by the service's clock, whether or not the expiry has run); confirming a
/// confirmed order returns it again. The endpoint exists with the payment window off too (a
/// reserved order is then `CONFIRMED` at once). With end-user identity on, only the owner
/// confirms: another user's order is 404.
#[utoipa::path(
    post, path = "/orders/{order_id}/confirm", operation_id = "confirm_order", tag = "orders",
    security((), ("bearerJwt" = [])),
    params(("order_id" = Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The confirmed order", body = Order, example = json!({
            "order_id": "0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80", "user_id": 1,
            "items": [{"product_id": 1001, "quantity": 2}], "amount": "200.00",
            "status": "CONFIRMED", "rejection_reason": null,
            "payment_due_at": "2026-11-29T21:15:00.123456Z",
            "created_at": "2026-11-29T21:00:00.123456Z", "updated_at": "2026-11-29T21:03:10.5Z"
        })),
        (status = 401, description = UNAUTHORIZED, body = shared::Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 404, description = "No such order (or, with identity on, not the caller's)", body = shared::Problem, content_type = PROBLEM),
        (status = 409, description = "`payment-window-closed`: the confirm came at or after `payment_due_at`; \
            `not-awaiting-payment`: the order is `PENDING` (retry after `Retry-After`), `REJECTED`, `CANCELLED` or `EXPIRED`",
            body = shared::Problem, content_type = PROBLEM,
            headers(("Retry-After" = u32, description = "On a `PENDING` order only: seconds to wait before confirming again")),
            examples(
                ("payment-window-closed" = (value = json!({
                    "type": "/problems/payment-window-closed", "title": "Payment window closed", "status": 409,
                    "detail": "the payment window of order 0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80 closed at 2026-11-29T21:15:00.123456+00:00"
                }))),
                ("not-awaiting-payment" = (value = json!({
                    "type": "/problems/not-awaiting-payment", "title": "Order not awaiting payment", "status": 409,
                    "detail": "order 0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80 is EXPIRED, not awaiting payment"
                }))),
            )),
    )
)]
pub async fn confirm(
    caller: Caller,
    State(state): State<AppState>,
    Path(order_id): Path<Uuid>,
) -> Result<Json<Order>, ApiError> {
    let mut tx = state.db.begin().await?;
    let outcome = confirm::confirm(tx.conn(), OrderId(order_id), caller.0).await?;
    tx.commit().await?;
    match outcome {
        Confirmed::Now(row, transition) => {
            transition.record();
            Ok(Json(row.into()))
        }
        Confirmed::Already(row) => Ok(Json(row.into())),
    }
}
