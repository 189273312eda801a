//! The orders routes: `POST /orders` (placed through the intake), `GET /orders/{order_id}`,
//! `GET /orders` (a page, newest first, filtered), and the status changes a customer asks
//! for: [`cancel`] and [`confirm`]. Thin: parse, call the use case or the queries, shape the
//! answer.

pub mod cancel;
pub mod confirm;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use platform::http::pagination::{self, Page};
use platform::http::{Json, Path, Query};
use platform::telemetry::TraceContext;
use serde::Deserialize;
use shared::ids::{OrderId, UserId};
use utoipa::IntoParams;
use uuid::Uuid;

use crate::error::ApiError;
use crate::identity::Caller;
use crate::orders::OrderStatus;
use crate::orders::place;
use crate::orders::view::Order;
use crate::state::AppState;

pub(crate) const PROBLEM: &str = "application/problem+json";
pub(crate) const UNAUTHORIZED: &str = "`unauthorized`: identity is on and the bearer token is missing or invalid (checked before anything else)";

/// Create an order
///
/// Exactly once per idempotency token: a retry with the same token and body replays the
/// first response (`Idempotent-Replayed: true`). The order starts `PENDING` and settles once
/// inventory has answered. With end-user identity on, `user_id` may be left out (the
/// caller's is used); naming another user, or presenting another user's token, is 403.
#[utoipa::path(
    post, path = "/orders", operation_id = "create_order", tag = "orders",
    security((), ("bearerJwt" = [])),
    params(("Idempotency-Key" = Uuid, Header, description = "A token from `POST /idempotency-tokens`")),
    request_body(content = crate::orders::body::OrderBody, description = "The canonical `items` form, or the flat one-item form"),
    responses(
        (status = 202, description = "Accepted (or the replay of the first response)", body = Order,
            headers(("Location" = String, description = "/orders/{order_id}"),
                    ("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        (status = 400, description = "Missing or unknown idempotency key, or malformed JSON", body = shared::Problem, content_type = PROBLEM),
        (status = 401, description = UNAUTHORIZED, body = shared::Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 403, description = "`forbidden`: `user_id` names another user, or the token was taken by another user", body = shared::Problem, content_type = PROBLEM),
        (status = 409, description = "`request-in-progress`: the first request with this token is still running; retry after `Retry-After`",
            body = shared::Problem, content_type = PROBLEM,
            headers(("Retry-After" = u32, description = "Seconds to wait before sending the request again"))),
        (status = 413, description = "Body over 64 KiB", body = shared::Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid order, or the token was used with another body", body = shared::Problem, content_type = PROBLEM),
    )
)]
pub async fn create(
    caller: Caller,
    State(state): State<AppState>,
    trace: TraceContext,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = platform::http::extract::header_text(&headers, "Idempotency-Key")?;
    let token = place::parse_token(key)?;
    let placed = place::place(&state.intake, &state.tokens, caller, token, &body, &trace).await?;
    let response = placed.response;
    let mut answer = (
        response.status.code(),
        [(header::CONTENT_TYPE, "application/json")],
        response.body,
    )
        .into_response();
    let location = format!("/orders/{}", response.order_id);
    if let Ok(location) = HeaderValue::from_str(&location) {
        answer.headers_mut().insert(header::LOCATION, location);
    }
    if placed.replayed {
        answer
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(answer)
}

/// Get an order
///
/// With end-user identity on, another user's order is 404, as if it did not exist.
#[utoipa::path(
    get, path = "/orders/{order_id}", operation_id = "get_order", tag = "orders",
    security((), ("bearerJwt" = [])),
    params(("order_id" = Uuid, Path, description = "The order's id")),
    responses(
        (status = 200, description = "The order", body = Order),
        (status = 401, description = UNAUTHORIZED, body = shared::Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 404, description = "No such order (or, with identity on, not the caller's)", body = shared::Problem, content_type = PROBLEM),
    )
)]
pub async fn get(
    caller: Caller,
    State(state): State<AppState>,
    Path(order_id): Path<Uuid>,
) -> Result<Json<Order>, ApiError> {
    let order_id = OrderId(order_id);
    let mut conn = state.db.acquire().await?;
    let row = crate::orders::queries::find(conn.conn(), order_id).await?;
    row.filter(|r| caller.0.is_none_or(|user| user.0 == r.user_id))
        .map(|r| Json(r.into()))
        .ok_or(ApiError::OrderNotFound(order_id))
}

/// Filters and paging of `GET /orders`; every value is checked, a bad one is a 422.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only this user's orders (positive integer). With identity on it defaults to the
    /// caller, and naming anyone else is 403.
    #[param(value_type = Option<i64>, minimum = 1, example = 1)]
    user_id: Option<String>,
    /// Only orders in this status.
    #[param(value_type = Option<OrderStatus>)]
    status: Option<String>,
    /// Page size: default 20; values above 100 are accepted and capped to 100; 0, negative or
    /// non-numeric values are refused with 422.
    #[param(value_type = Option<i64>, minimum = 1, example = 20)]
    limit: Option<String>,
    /// An opaque cursor: the `next` of the previous page, passed back unchanged. Anything
    /// else is refused with 422.
    after: Option<String>,
}

/// List orders, newest first
///
/// With end-user identity on, only the caller's orders.
#[utoipa::path(
    get, path = "/orders", operation_id = "list_orders", tag = "orders",
    security((), ("bearerJwt" = [])),
    params(ListParams),
    responses(
        (status = 200, description = "One page of orders", body = inline(Page<Order>)),
        (status = 401, description = UNAUTHORIZED, body = shared::Problem, content_type = PROBLEM,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 403, description = "`forbidden`: the `user_id` filter names another user", body = shared::Problem, content_type = PROBLEM),
        (status = 422, description = "A filter, limit or cursor is invalid", body = shared::Problem, content_type = PROBLEM),
    )
)]
pub async fn list(
    caller: Caller,
    State(state): State<AppState>,
    Query(params): Query<ListParams>,
) -> Result<Json<Page<Order>>, ApiError> {
    let limit = pagination::limit(params.limit.as_deref())?;
    let requested = params.user_id.as_deref().map(parse_user_id).transpose()?;
    let query = crate::orders::queries::ListQuery {
        user_id: whose_orders(caller, requested)?,
        status: params.status.as_deref().map(parse_status).transpose()?,
        after: params.after.as_deref().map(decode_cursor).transpose()?,
        fetch: limit + 1,
    };
    let mut conn = state.db.acquire().await?;
    let rows = crate::orders::queries::list(conn.conn(), &query).await?;
    let page = Page::from_rows(rows, limit, |row| {
        encode_cursor(row.created_at, row.order_id)
    });
    Ok(Json(Page {
        items: page.items.into_iter().map(Order::from).collect(),
        next: page.next,
    }))
}

/// The user whose orders a caller lists: anyone's (or everyone's) without identity, only
/// their own with it.
fn whose_orders(caller: Caller, requested: Option<UserId>) -> Result<Option<UserId>, ApiError> {
    match (caller.0, requested) {
        (None, requested) => Ok(requested),
        (Some(me), None) => Ok(Some(me)),
        (Some(me), Some(other)) if other != me => Err(ApiError::Forbidden(
            "user_id names another user: you may list only your own orders".into(),
        )),
        (Some(me), Some(_)) => Ok(Some(me)),
    }
}

fn parse_user_id(raw: &str) -> Result<UserId, ApiError> {
    match raw.trim().parse::<i64>() {
        Ok(id) if id >= 1 => Ok(UserId(id)),
        _ => Err(ApiError::Validation(format!(
            "user_id must be a positive integer, got {raw:?}"
        ))),
    }
}

fn parse_status(raw: &str) -> Result<OrderStatus, ApiError> {
    OrderStatus::parse(raw.trim()).ok_or_else(|| {
        ApiError::Validation(format!(
            "status must be one of {}; got {raw:?}",
            OrderStatus::ALL.map(OrderStatus::as_str).join(", ")
        ))
    })
}

/// Cursors are `<created_at in microseconds>.<order id>`: opaque to clients, stable, and
/// enough to continue the `(created_at, order_id)` ordering without another lookup.
fn encode_cursor(created_at: DateTime<Utc>, order_id: Uuid) -> String {
    format!("{}.{}", created_at.timestamp_micros(), order_id.simple())
}

fn decode_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let invalid =
        || ApiError::Validation(format!("after {raw:?} is not a cursor this API returned"));
    let (micros, id) = raw.split_once('.').ok_or_else(invalid)?;
    let at = micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_micros)
        .ok_or_else(invalid)?;
    let id = Uuid::parse_str(id).map_err(|_| invalid())?;
    Ok((at, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let at = DateTime::<Utc>::from_timestamp_micros(1_764_450_000_123_456).unwrap_or_default();
        let id = Uuid::now_v7();
        assert_eq!(decode_cursor(&encode_cursor(at, id)).ok(), Some((at, id)));
        for bad in ["", "abc", "1.2", "x.0193f6a27c1e7d3a9f0e2b4c5d6e7f80"] {
            assert!(decode_cursor(bad).is_err(), "{bad}");
        }
    }
}
