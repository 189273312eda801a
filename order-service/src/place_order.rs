//! Creating an order exactly once per idempotency token (SPEC §4.1).
//!
//! 1. The request is validated first: a refused request does not use up its token.
//! 2. The token is claimed in Redis atomically (`issued` -> in flight).
//! 3. Order, outbox row and the token's outcome commit in one statement; the outcome's
//!    primary key makes a second order for the token impossible even when Redis forgot it.
//! 4. The response is cached in Redis for fast replays; PostgreSQL stays the source of truth.

use axum::body::Bytes;
use chrono::{SubsecRound, Utc};
use platform::http::TraceContext;
use platform::outbox::NewOutboxRow;
use shared::events::{Envelope, OrderCreated, OrderEvent};
use shared::ids::OrderId;
use shared::keys;
use uuid::Uuid;

use crate::db;
use crate::domain::{CreateOrderRequest, NewOrder, fingerprint};
use crate::error::ApiError;
use crate::idempotency::{Claim, StoredResponse};
use crate::representation::Order;
use crate::state::AppState;

/// The answer to give: the stored response, and whether it is a replay.
#[derive(Debug)]
pub struct Placed {
    pub response: StoredResponse,
    pub replayed: bool,
}

/// Parses the token of an `Idempotency-Key` header value.
pub fn parse_token(header: Option<&str>) -> Result<Uuid, ApiError> {
    let raw = header.ok_or(ApiError::MissingIdempotencyKey)?;
    // A value that is not one of our UUIDs was never issued.
    Uuid::parse_str(raw.trim()).map_err(|_| ApiError::UnknownIdempotencyKey)
}

pub async fn place(
    state: &AppState,
    token: Uuid,
    body: &Bytes,
    trace: &TraceContext,
) -> Result<Placed, ApiError> {
    let document: serde_json::Value = platform::http::extract::parse(body)?;
    let request: CreateOrderRequest = serde_json::from_value(document.clone())
        .map_err(|e| ApiError::Validation(e.to_string()))?;
    let order = NewOrder::parse(request).map_err(ApiError::Validation)?;
    let fingerprint = fingerprint::of_json(&document);

    match state.tokens.claim(&token, &fingerprint).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::Done(first)) => return replay(first, &fingerprint),
        Ok(Claim::InFlight { fingerprint: other }) if other == fingerprint => {
            return Err(ApiError::RequestInProgress);
        }
        Ok(Claim::InFlight { .. }) => return Err(ApiError::IdempotencyKeyReused),
        Ok(Claim::Unknown) => {
            return match stored_outcome(state, &token).await? {
                Some(first) => replay(first, &fingerprint),
                None => Err(ApiError::UnknownIdempotencyKey),
            };
        }
        Err(error) => {
            tracing::warn!(%error, "Redis unavailable while claiming a token");
            return match stored_outcome(state, &token).await? {
                Some(first) => replay(first, &fingerprint),
                None => Err(ApiError::Unavailable("redis")),
            };
        }
    }

    match create(state, token, &order, fingerprint.clone(), trace).await {
        Ok(response) => {
            if let Err(error) = state.tokens.complete(&token, &response).await {
                tracing::warn!(%error, "could not cache the response in Redis; PostgreSQL has it");
                // Do not leave the token "in flight": a retry then claims it, runs into the
                // unique key in PostgreSQL and gets the stored response, instead of 409s.
                state.tokens.release(&token, &fingerprint).await.ok();
            }
            metrics::counter!(crate::metrics::ORDER_TRANSITIONS_TOTAL, "to" => "PENDING")
                .increment(1);
            Ok(Placed {
                response,
                replayed: false,
            })
        }
        // Redis forgot the token was used and let a second request through: the database
        // refused the duplicate, so answer with what the first request got.
        Err(ApiError::Database(sqlx::Error::Database(e)))
            if e.constraint() == Some(db::idempotency::TOKEN_KEY) =>
        {
            match stored_outcome(state, &token).await? {
                Some(first) => replay(first, &fingerprint),
                None => Err(ApiError::RequestInProgress),
            }
        }
        Err(error) => {
            if let Err(e) = state.tokens.release(&token, &fingerprint).await {
                tracing::warn!(error = %e, "could not release the token after a failure");
            }
            Err(error)
        }
    }
}

async fn create(
    state: &AppState,
    token: Uuid,
    order: &NewOrder,
    fingerprint: String,
    trace: &TraceContext,
) -> Result<StoredResponse, ApiError> {
    let order_id = OrderId::new();
    // PostgreSQL keeps microseconds: truncate, so the stored row and the response agree.
    let created_at = Utc::now().trunc_subsecs(6);
    let body = serde_json::to_string(&Order::placed(order_id, order, created_at))
        .map_err(anyhow::Error::from)?;
    let response = StoredResponse {
        fingerprint,
        order_id: order_id.0,
        status: 202,
        body,
    };
    let event = Envelope::new(OrderEvent::Created(OrderCreated {
        order_id,
        user_id: order.user_id,
        items: order.items.clone(),
        amount: order.amount,
    }));
    let event =
        NewOutboxRow::new(keys::ORDERS_EXCHANGE, &event, trace).map_err(anyhow::Error::from)?;
    let mut conn = state.db.acquire().await?;
    db::placement::insert(
        &mut conn, order_id, order, created_at, &token, &response, event,
    )
    .await?;
    state.outbox.wake();
    Ok(response)
}

async fn stored_outcome(
    state: &AppState,
    token: &Uuid,
) -> Result<Option<StoredResponse>, ApiError> {
    let mut conn = state.db.acquire().await?;
    let stored = db::idempotency::find(&mut conn, token).await?;
    if let Some(response) = &stored {
        // Warm the cache again so the next replay does not reach PostgreSQL.
        state.tokens.complete(token, response).await.ok();
    }
    Ok(stored)
}

fn replay(first: StoredResponse, fingerprint: &str) -> Result<Placed, ApiError> {
    if first.fingerprint != fingerprint {
        return Err(ApiError::IdempotencyKeyReused);
    }
    Ok(Placed {
        response: first,
        replayed: true,
    })
}
