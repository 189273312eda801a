//! `POST /orders/{order_id}/cancel`: the saga's compensation, asked for by the customer.

use axum::extract::State;
use platform::http::{Json, Path};
use platform::telemetry::TraceContext;
use shared::ids::OrderId;
use uuid::Uuid;

use super::{PROBLEM, UNAUTHORIZED};
use crate::error::ApiError;
use crate::identity::Caller;
use crate::orders::cancellation::{self, Cancelled};
use crate::orders::view::Order;
use crate::state::AppState;

/// Cancel an order
///
/// `PENDING`, `AWAITING_PAYMENT` or `CONFIRMED` orders become `CANCELLED` and inventory gives
/// back whatever it deducted for them (once). An order waiting for its payment at or after
/// its `payment_due_at` becomes `EXPIRED` instead (its stock given back the same way).
/// Cancelling a cancelled order returns it again; an `EXPIRED` order is returned unchanged.
/// With end-user identity on, another user's order is 404 and stays as it is.
#[utoipa::path(
    post, path = "/orders/{order_id}/cancel", operation_id = "cancel_order", tag = "orders",
    security((), ("bearerJwt" = [])),
    params(("order_id" = Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The cancelled order (or expired, when its payment window had closed)", body = Order),
        (status = 401, description = UNAUTHORIZED, body = shared::Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 404, description = "No such order (or, with identity on, not the caller's)", body = shared::Problem, content_type = PROBLEM),
        (status = 409, description = "The order was rejected; there is nothing to cancel", body = shared::Problem, content_type = PROBLEM),
    )
)]
pub async fn cancel(
    caller: Caller,
    State(state): State<AppState>,
    trace: TraceContext,
    Path(order_id): Path<Uuid>,
) -> Result<Json<Order>, ApiError> {
    let order_id = OrderId(order_id);
    let mut tx = state.db.begin().await?;
    let outcome = cancellation::cancel(tx.conn(), order_id, caller.0, &trace).await?;
    tx.commit().await?;
    match outcome {
        Cancelled::Now(row, transition, events) => {
            state.outbox.committed(events);
            transition.record();
            Ok(Json(row.into()))
        }
        Cancelled::Already(row) => Ok(Json(row.into())),
        Cancelled::Rejected => Err(ApiError::NotCancellable(order_id)),
        Cancelled::NotFound => Err(ApiError::OrderNotFound(order_id)),
    }
}
