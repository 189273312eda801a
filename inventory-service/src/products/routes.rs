//! `/products`: create (admin), read, list, restock (admin).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use platform::http::pagination::{self, Page};
use platform::http::{AdminAuth, Json, Path, Query};
use serde::Deserialize;
use shared::ids::ProductId;
use utoipa::{IntoParams, ToSchema};

use super::product::{IdempotencyKey, NewProduct, Product, RestockQuantity};
use super::queries;
use super::restock::{self, Restock};
use crate::error::ApiError;
use crate::input::{self, Invalid};
use crate::replay::StoredResponse;
use crate::state::AppState;

/// `POST /products` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"product_id": 1001, "name": "Espresso beans 1 kg", "stock": 10}))]
pub struct CreateProduct {
    /// Positive; chosen by the catalogue.
    #[schema(minimum = 1, example = 1001)]
    pub product_id: i64,
    /// 1 to 200 characters, not blank; surrounding whitespace is trimmed.
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// Initial stock, 0 to 1,000,000,000.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    pub stock: i64,
}

/// `POST /products/{product_id}/restock` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"quantity": 5}))]
pub struct RestockBody {
    /// Units to add, 1 to 1,000,000,000 (as much as a product may start with).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub quantity: i64,
}

/// `GET /products` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Page size: default 20; values above 100 are accepted and capped to 100; 0, negative or
    /// non-numeric values are refused with 422.
    #[param(value_type = Option<i64>, minimum = 1, example = 20)]
    pub limit: Option<String>,
    /// An opaque cursor: the `next` of the previous page, passed back unchanged. Anything
    /// else is refused with 422.
    pub after: Option<String>,
}

/// Create a product (admin).
#[utoipa::path(post, path = "/products", tag = "products", operation_id = "create_product", request_body = CreateProduct,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Created; `Location` names the product", body = Product),
        (status = 400, description = "Broken JSON", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`product-exists`: a product with this id exists", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn create(
    _: AdminAuth,
    State(state): State<AppState>,
    Json(body): Json<CreateProduct>,
) -> Result<impl IntoResponse, ApiError> {
    let product = NewProduct::parse(body.product_id, &body.name, body.stock)?;
    let created = queries::insert(state.db.acquire().await?.conn(), &product)
        .await?
        .ok_or(ApiError::ProductExists(product.product_id))?;
    let location = HeaderValue::try_from(format!("/products/{}", created.product_id))
        .map_err(anyhow::Error::from)?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(created),
    ))
}

/// Read a product.
#[utoipa::path(get, path = "/products/{product_id}", tag = "products", operation_id = "get_product",
    params(("product_id" = i64, Path, description = "The product's id", minimum = 1)),
    responses(
        (status = 200, description = "The product", body = Product),
        (status = 404, description = "`not-found`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn get(
    State(state): State<AppState>,
    Path(product_id): Path<i64>,
) -> Result<Json<Product>, ApiError> {
    let product_id = existing_id(product_id)?;
    queries::find(state.db.acquire().await?.conn(), product_id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(product_id))
}

/// List products in ascending product id, a page at a time.
#[utoipa::path(get, path = "/products", tag = "products", operation_id = "list_products", params(ListQuery),
    responses(
        (status = 200, description = "A page of products; pass `next` as `after` for the following page",
            body = Page<Product>,
            example = json!({"items": [{"product_id": 1001, "name": "Espresso beans 1 kg", "stock": 8, "version": 3,
                "updated_at": "2026-11-29T12:00:00Z"}], "next": "1001"})),
        (status = 422, description = "`validation-failed`: a bad `limit` or `after`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Product>>, ApiError> {
    let limit = pagination::limit(query.limit.as_deref()).map_err(|p| Invalid::new(p.detail))?;
    let after = query.after.as_deref().map(parse_cursor).transpose()?;
    let rows = queries::list(state.db.acquire().await?.conn(), after, limit + 1).await?;
    Ok(Json(Page::from_rows(rows, limit, |p| {
        p.product_id.to_string()
    })))
}

/// Add stock (admin). With an `Idempotency-Key`, a repeat adds nothing and answers the first
/// response again (with `Idempotent-Replayed: true`).
#[utoipa::path(post, path = "/products/{product_id}/restock", tag = "products", operation_id = "restock_product", request_body = RestockBody,
    security(("admin_token" = [])),
    params(
        ("product_id" = i64, Path, description = "The product's id", minimum = 1),
        ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255,
            description = "Client-chosen, 1 to 255 characters. The same key with another product or quantity is refused with 422 `idempotency-key-reused`."),
    ),
    responses(
        (status = 200, description = "The product after the restock (or the first response, replayed)", body = Product),
        (status = 400, description = "Broken JSON", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`: no such product", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`validation-failed`, or `idempotency-key-reused`", body = shared::Problem, content_type = "application/problem+json"),
    ))]
pub async fn restock(
    _: AdminAuth,
    State(state): State<AppState>,
    Path(product_id): Path<i64>,
    headers: HeaderMap,
    Json(body): Json<RestockBody>,
) -> Result<StoredResponse, ApiError> {
    let product_id = existing_id(product_id)?;
    let restock = Restock {
        product_id,
        quantity: RestockQuantity::parse(body.quantity)?,
        key: idempotency_key(&headers)?,
    };
    restock::apply(&state, &restock).await
}

/// A path id that could name a product; anything else names nothing (404).
fn existing_id(raw: i64) -> Result<ProductId, ApiError> {
    input::product_id(raw).map_err(|_| not_found(ProductId(raw)))
}

fn not_found(product_id: ProductId) -> ApiError {
    ApiError::NotFound(format!("product {product_id} does not exist"))
}

fn parse_cursor(raw: &str) -> Result<ProductId, Invalid> {
    raw.trim()
        .parse::<i64>()
        .ok()
        .filter(|id| *id >= 0)
        .map(ProductId)
        .ok_or_else(|| {
            Invalid::new(format!(
                "after must be a cursor returned as `next`, got {raw:?}"
            ))
        })
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, Invalid> {
    platform::http::extract::header_text(headers, "Idempotency-Key")
        .map_err(|problem| Invalid::new(problem.detail))?
        .map(IdempotencyKey::parse)
        .transpose()
}
