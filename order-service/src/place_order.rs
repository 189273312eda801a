//! Creating an order exactly once per idempotency token (docs/contract.md §4.1).
//!
//! 1. The request is validated first: a refused request does not use up its token. With
//!    identity on, a body without `user_id` orders for the caller, and one naming another
//!    user is refused; the token's taker is the caller.
//! 2. Everything the order's rows hold is prepared here, in the handler's task: its id, its
//!    `order.created` event and the exact 202 body that is stored as the token's outcome.
//! 3. The order joins the next intake batch ([`crate::intake`]), which claims its token in
//!    Redis, commits order, outbox row and outcome with the rest of the batch in one
//!    statement, and hands back this request's own answer. The outcome's primary key makes a
//!    second order for the token impossible even when Redis forgot it.

use axum::body::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use platform::http::TraceContext;
use platform::outbox::NewOutboxRow;
use shared::events::{Envelope, OrderCreated, OrderEvent};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

use crate::auth::Caller;
use crate::db::placement::NewPlacement;
use crate::domain::{CreateOrderRequest, NewOrder, fingerprint, new_order};
use crate::domain::{ResponseStatus, StoredResponse};
use crate::error::ApiError;
use crate::representation::Order;
use crate::state::AppState;

/// The answer to give: the stored response, and whether it is a replay.
#[derive(Debug)]
pub struct Placed {
    pub response: StoredResponse,
    pub replayed: bool,
}

/// A validated order ready for its batch.
#[derive(Debug, Clone)]
pub struct Placement {
    pub row: NewPlacement,
    /// The token's expiry when it proves it was issued here and is unexpired: a token Redis
    /// forgot is then claimed again rather than refused as unknown.
    pub recreate_until: Option<DateTime<Utc>>,
}

/// Parses the token of an `Idempotency-Key` header value.
pub fn parse_token(header: Option<&str>) -> Result<Uuid, ApiError> {
    let raw = header.ok_or(ApiError::MissingIdempotencyKey)?;
    // A value that is not one of our UUIDs was never issued.
    Uuid::parse_str(raw.trim()).map_err(|_| ApiError::UnknownIdempotencyKey)
}

pub async fn place(
    state: &AppState,
    caller: Caller,
    token: Uuid,
    body: &Bytes,
    trace: &TraceContext,
) -> Result<Placed, ApiError> {
    let mut document: serde_json::Value = platform::http::extract::parse(body)?;
    if let Some(user) = caller.0 {
        new_order::default_user(&mut document, user);
    }
    let request: CreateOrderRequest = serde_json::from_value(document.clone())
        .map_err(|e| ApiError::Validation(e.to_string()))?;
    let order = NewOrder::parse(request).map_err(ApiError::Validation)?;
    if caller.0.is_some_and(|user| user != order.user_id) {
        return Err(ApiError::Forbidden(
            "user_id names another user: leave it out to order as yourself".into(),
        ));
    }
    let placement = Placement {
        row: prepare(token, order, fingerprint::of_json(&document), caller, trace)?,
        recreate_until: state.tokens.live_expiry(&token, caller.0),
    };
    state.intake.submit(placement).await
}

/// The three rows of a new order, with the response that becomes the token's outcome.
fn prepare(
    token: Uuid,
    order: NewOrder,
    fingerprint: String,
    caller: Caller,
    trace: &TraceContext,
) -> Result<NewPlacement, ApiError> {
    let order_id = OrderId::new();
    // PostgreSQL keeps microseconds: truncate, so the stored row and the response agree.
    let created_at = Utc::now().trunc_subsecs(6);
    let body = serde_json::to_string(&Order::placed(order_id, &order, created_at))
        .map_err(anyhow::Error::from)?;
    let response = StoredResponse {
        fingerprint,
        order_id: order_id.0,
        status: ResponseStatus::ACCEPTED,
        body,
        taker: caller.0,
    };
    let event = Envelope::new(OrderEvent::Created(OrderCreated {
        order_id,
        user_id: order.user_id,
        items: order.items.clone(),
        amount: order.amount,
    }));
    let event =
        NewOutboxRow::new(keys::ORDERS_EXCHANGE, &event, trace).map_err(anyhow::Error::from)?;
    Ok(NewPlacement {
        order_id,
        order,
        created_at,
        token,
        response,
        event,
    })
}
