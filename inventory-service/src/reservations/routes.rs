//! `GET /reservations/{order_id}`: what inventory did with an order's stock (reconciliation
//! asks this when an order has waited too long). With `RESERVATIONS_REQUIRE_ADMIN` it needs
//! the admin token: once end users are told apart, nobody else may read their orders' stock.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use platform::http::{Json, Path};
use serde::Serialize;
use shared::events::{LineItem, RejectionReason};
use shared::ids::OrderId;
use utoipa::ToSchema;
use uuid::Uuid;

use super::queries::{self, ReservationState};
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "order_id": "0193f6a2-7c1e-7d3a-9f0e-2b4c5d6e7f80", "state": "APPLIED",
    "items": [{"product_id": 1001, "quantity": 2}], "rejection_reason": null,
    "updated_at": "2026-11-29T21:00:00.123456Z"
}))]
pub struct ReservationView {
    pub order_id: OrderId,
    pub state: ReservationState,
    /// The order's items (deducted only in `APPLIED`, given back in `RELEASED`).
    pub items: Vec<LineItem>,
    /// Why, when `REJECTED`.
    pub rejection_reason: Option<RejectionReason>,
    pub updated_at: DateTime<Utc>,
}

/// Read an order's reservation
///
/// Open, unless the service runs with `RESERVATIONS_REQUIRE_ADMIN=true` (with end-user
/// identity on): then only the admin token may read it.
#[utoipa::path(get, path = "/reservations/{order_id}", tag = "reservations", operation_id = "get_reservation",
    params(("order_id" = Uuid, Path, description = "The order's id")),
    security((), ("admin_token" = [])),
    responses(
        (status = 200, description = "What happened to the order's stock", body = ReservationView),
        (status = 401, description = "`unauthorized`: the admin token is required here and was missing or wrong", body = shared::Problem, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"admin\"`"))),
        (status = 404, description = "`not-found`: no event of this order was ever seen", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(order_id): Path<Uuid>,
) -> Result<Response, ApiError> {
    if state.config.reservations_require_admin && !state.admin_token.admits(&headers) {
        return Ok(platform::http::admin::unauthorized());
    }
    let order_id = OrderId(order_id);
    let reservation = queries::find(state.db.acquire().await?.conn(), order_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no event of order {order_id} was ever seen")))?;
    Ok(Json(ReservationView {
        order_id,
        state: reservation.state,
        items: reservation.items,
        rejection_reason: reservation.rejection_reason,
        updated_at: reservation.updated_at,
    })
    .into_response())
}
