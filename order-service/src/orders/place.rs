//! Creating an order exactly once per idempotency token (docs/contract.md §4.1).
//!
//! 1. The request is validated first: a refused request does not use up its token. With
//!    identity on, a body without `user_id` orders for the caller, and one naming another
//!    user is refused; the token's taker is the caller.
//! 2. Everything the order's rows hold is prepared here, in the handler's task: its id, its
//!    `order.created` event and the exact 202 body that is stored as the token's outcome.
//! 3. The order joins the next intake batch ([`crate::orders::intake`]), which claims its token in
//!    Redis, commits order, outbox row and outcome with the rest of the batch in one
//!    statement, and hands back this request's own answer. The outcome's primary key makes a
//!    second order for the token impossible even when Redis forgot it.

use axum::body::Bytes;
use chrono::{SubsecRound, Utc};
use platform::messaging::outbox::NewOutboxRow;
use platform::telemetry::TraceContext;
use shared::events::{Envelope, OrderCreated, OrderEvent};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

use crate::identity::Caller;
use crate::orders::intake::placement::NewPlacement;
use crate::orders::intake::{Intake, Placed, Placement};
use crate::orders::place_error::PlaceError;
use crate::orders::request;
use crate::orders::view::Order;
use crate::orders::{CreateOrderRequest, NewOrder};
use crate::tokens::fingerprint;
use crate::tokens::store::TokenStore;
use crate::tokens::{ResponseStatus, StoredResponse};

/// Parses the token of an `Idempotency-Key` header value. An empty value is a missing key: most
/// often a client variable that held nothing, better told so than "unknown".
pub fn parse_token(header: Option<&str>) -> Result<Uuid, PlaceError> {
    let raw = header
        .filter(|value| !value.trim().is_empty())
        .ok_or(PlaceError::MissingIdempotencyKey)?;
    // A value that is not one of our UUIDs was never issued.
    Uuid::parse_str(raw.trim()).map_err(|_| PlaceError::UnknownIdempotencyKey)
}

pub async fn place(
    intake: &Intake,
    tokens: &TokenStore,
    caller: Caller,
    token: Uuid,
    body: &Bytes,
    trace: &TraceContext,
) -> Result<Placed, PlaceError> {
    let mut document = platform::http::extract::parse_document(body)?;
    if let Some(user) = caller.0 {
        request::default_user(&mut document, user);
    }
    let request: CreateOrderRequest =
        serde_json::from_value(document.clone()).map_err(|e| PlaceError::Invalid(e.to_string()))?;
    let order = NewOrder::parse(request).map_err(PlaceError::Invalid)?;
    if caller.0.is_some_and(|user| user != order.user_id) {
        return Err(PlaceError::Forbidden(
            "user_id names another user: leave it out to order as yourself".into(),
        ));
    }
    let placement = Placement {
        row: prepare(token, order, fingerprint::of_json(&document), caller, trace)?,
        recreate_until: tokens.live_expiry(&token, caller.0),
    };
    intake.submit(placement).await
}

/// The three rows of a new order, with the response that becomes the token's outcome.
fn prepare(
    token: Uuid,
    order: NewOrder,
    fingerprint: String,
    caller: Caller,
    trace: &TraceContext,
) -> Result<NewPlacement, PlaceError> {
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
