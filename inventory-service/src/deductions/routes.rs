//! `POST /deductions`: the synchronous "flash sale" path.

use axum::extract::State;
use platform::http::{AdminAuth, Json};
use serde::Deserialize;
use utoipa::ToSchema;

use super::DeductionApplied;
use super::request::{DeductionId, DeductionRequest, Items};
use crate::error::ApiError;
use crate::replay::StoredResponse;
use crate::state::AppState;

/// `POST /deductions` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "deduction_id": "flash-2026-11-29-0001",
    "items": [{"product_id": 1001, "quantity": 1}]
}))]
pub struct DeductionBody {
    /// The client's name for this deduction, 1 to 128 characters; repeating it replays the
    /// first outcome.
    #[schema(min_length = 1, max_length = 128)]
    pub deduction_id: String,
    /// 1 to 100 items, no product twice.
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<ItemBody>,
}

/// One item of a deduction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemBody {
    #[schema(minimum = 1, example = 1001)]
    pub product_id: i64,
    /// 1 to 1,000,000.
    #[schema(minimum = 1, maximum = 1_000_000, example = 1)]
    pub quantity: i64,
}

/// Deduct stock now, all items or none (admin).
///
/// Idempotent by `deduction_id`: the same id with the same items (in any order) answers the
/// first outcome byte for byte, even a 409 and even after a restock, with
/// `Idempotent-Replayed: true`, and deducts nothing more; with other items, 422
/// `idempotency-key-reused`.
#[utoipa::path(post, path = "/deductions", tag = "deductions", operation_id = "create_deduction", request_body = DeductionBody,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Every item was deducted", body = DeductionApplied),
        (status = 400, description = "Broken JSON", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown-product`: some product does not exist; nothing was deducted",
            body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`insufficient-stock`: some product has too little stock; nothing was deducted",
            body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`, or `idempotency-key-reused`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`busy`: the stock stayed locked or kept changing; nothing was deducted, retry after `Retry-After`",
            body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn create(
    _: AdminAuth,
    State(state): State<AppState>,
    Json(body): Json<DeductionBody>,
) -> Result<StoredResponse, ApiError> {
    let request = DeductionRequest::sale(
        DeductionId::parse(&body.deduction_id)?,
        Items::parse(body.items.iter().map(|i| (i.product_id, i.quantity)))?,
    );
    Ok(state.deductions.apply(request).await?)
}
