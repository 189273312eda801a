//! `POST /holds`, `POST /holds/{hold_id}/confirm`, `POST /holds/{hold_id}/cancel`,
//! `GET /holds/{hold_id}`: all four need the admin token.

use axum::extract::State;
use platform::http::{AdminAuth, Json, Path};
use serde::Deserialize;

use super::end;
use super::view::Hold;
use crate::deductions::request::{DeductionId, DeductionRequest, Items, Take};
use crate::deductions::routes::ItemBody;
use crate::error::ApiError;
use crate::input::Invalid;
use crate::replay::StoredResponse;
use crate::state::AppState;

/// The longest a hold may last: a day.
pub const MAX_TTL_SECS: i64 = 86_400;

/// `POST /holds` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "hold_id": "checkout-7f3a",
    "items": [{"product_id": 1001, "quantity": 2}],
    "ttl_secs": 600
}))]
pub struct HoldBody {
    /// The caller's name for this hold, 1 to 128 characters; repeating the try with it replays
    /// the first outcome.
    #[schema(min_length = 1, max_length = 128)]
    pub hold_id: String,
    /// 1 to 100 items, no product twice.
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<ItemBody>,
    /// How long the units stay held unless confirmed or cancelled, 1 to 86,400; omitted:
    /// `HOLD_TTL_SECS` (default 900).
    #[schema(minimum = 1, maximum = 86_400)]
    pub ttl_secs: Option<i64>,
}

/// Hold stock until it is confirmed, cancelled or expires (admin).
///
/// All items or none. The units leave the product's `stock` and count in its `held`. Idempotent
/// by `hold_id`: the same body again answers the first outcome byte for byte (even a refusal,
/// even after a restock) with `Idempotent-Replayed: true` and holds nothing more; another body
/// → 422 `idempotency-key-reused`. A try after a cancel of the same `hold_id` holds nothing.
#[utoipa::path(post, path = "/holds", tag = "holds", operation_id = "create_hold", request_body = HoldBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Every item is held until `expires_at`", body = Hold),
        (status = 400, description = "Broken JSON", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown-product`: some product does not exist; nothing was held",
            body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`insufficient-stock` (nothing was held), or `hold-cancelled`: a cancel of this `hold_id` came first",
            body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`, or `idempotency-key-reused`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`busy`: the stock stayed locked or kept changing; nothing was held, retry after `Retry-After`",
            body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn create(
    _: AdminAuth,
    State(state): State<AppState>,
    Json(body): Json<HoldBody>,
) -> Result<StoredResponse, ApiError> {
    let ttl_secs = body.ttl_secs.unwrap_or(state.config.hold_ttl_secs);
    if !(1..=MAX_TTL_SECS).contains(&ttl_secs) {
        return Err(Invalid::new(format!(
            "ttl_secs must be between 1 and {MAX_TTL_SECS}, got {ttl_secs}"
        ))
        .into());
    }
    let request = DeductionRequest {
        id: hold_id(&body.hold_id)?,
        items: Items::parse(body.items.iter().map(|i| (i.product_id, i.quantity)))?,
        take: Take::Hold { ttl_secs },
    };
    Ok(state.deductions.apply(request).await?)
}

/// Confirm a hold: its units are sold for good (admin).
///
/// Only before `expires_at`, by the database's clock, whether or not the expiry has run yet.
/// Confirming a confirmed hold returns it again.
#[utoipa::path(post, path = "/holds/{hold_id}/confirm", tag = "holds", operation_id = "confirm_hold",
    params(("hold_id" = String, Path, description = "The hold's id")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The hold, `CONFIRMED`", body = Hold),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`: no try of this `hold_id` held anything", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`hold-expired` (its deadline passed) or `hold-cancelled`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`: not a possible `hold_id`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn confirm(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Hold>, ApiError> {
    let id = hold_id(&raw)?;
    Ok(Json(
        end::confirm(&state.deductions, &state.hold_ends, id.as_str()).await?,
    ))
}

/// Cancel a hold: its units go back to stock, once (admin).
///
/// Cancelling a cancelled hold returns it again; an `EXPIRED` hold, or a `HELD` one at or after
/// its `expires_at`, is returned `EXPIRED`. A `hold_id` never tried gets a tombstone (`CANCELLED`,
/// `items: []`, `expires_at: null`), so a late try of it holds nothing.
#[utoipa::path(post, path = "/holds/{hold_id}/cancel", tag = "holds", operation_id = "cancel_hold",
    params(("hold_id" = String, Path, description = "The hold's id")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The hold, `CANCELLED` (or `EXPIRED`)", body = Hold),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`hold-confirmed`: its units are sold", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`: not a possible `hold_id`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn cancel(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Hold>, ApiError> {
    let id = hold_id(&raw)?;
    Ok(Json(
        end::cancel(&state.deductions, &state.hold_ends, id.as_str()).await?,
    ))
}

/// Read a hold (admin).
#[utoipa::path(get, path = "/holds/{hold_id}", tag = "holds", operation_id = "get_hold",
    params(("hold_id" = String, Path, description = "The hold's id")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The hold (a tombstone too)", body = Hold),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`: never tried nor cancelled", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`: not a possible `hold_id`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn get(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Hold>, ApiError> {
    let id = hold_id(&raw)?;
    Ok(Json(end::find(&state.db, id.as_str()).await?))
}

fn hold_id(raw: &str) -> Result<DeductionId, Invalid> {
    DeductionId::parse_field("hold_id", raw)
}
