//! Creating an order exactly once per idempotency token (SPEC §4.1).
//!
//! 1. The request is validated first: a refused request does not use up its token.
//! 2. The token is claimed in Redis atomically (`issued` -> in flight). A token Redis does
//!    not know (it lost its keys) and PostgreSQL has no outcome for is claimed again if it
//!    proves it was issued here and is unexpired; otherwise it is unknown (400).
//! 3. Order, outbox row and the token's outcome commit in one statement; the outcome's
//!    primary key makes a second order for the token impossible even when Redis forgot it.
//! 4. The response is cached in Redis for fast replays; PostgreSQL stays the source of truth.
//!
//! Redis losing its keys while a first request A is between its claim and its commit: a
//! repeat B finds no key, no outcome (A's is uncommitted), a valid token, and claims it
//! again. B's insert then waits on A's uncommitted `idempotency_keys_pkey` entry and, once A
//! commits, fails on it; B answers A's outcome. No extra write was needed on A's path.

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
use platform::redis_health::RedisCallError;

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

    if let Some(answer) = claim(state, &token, &fingerprint).await? {
        return answer;
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

/// Claims the token for this request: `None` when it may go on and create the order, or the
/// answer to give instead.
async fn claim(
    state: &AppState,
    token: &Uuid,
    fingerprint: &str,
) -> Result<Option<Result<Placed, ApiError>>, ApiError> {
    let mut claimed = state.tokens.claim(token, fingerprint).await;
    if let Ok(Claim::Unknown) = claimed {
        if let Some(first) = stored_outcome(state, token).await? {
            return Ok(Some(replay(first, fingerprint)));
        }
        let Some(expires_at) = state.tokens.live_expiry(token) else {
            return Ok(Some(Err(ApiError::UnknownIdempotencyKey)));
        };
        claimed = state.tokens.reclaim(token, fingerprint, expires_at).await;
    }
    let answer = match claimed {
        Ok(Claim::Claimed) => return Ok(None),
        Ok(Claim::Done(first)) => replay(first, fingerprint),
        Ok(Claim::InFlight { fingerprint: other }) if other == fingerprint => {
            Err(ApiError::RequestInProgress)
        }
        Ok(Claim::InFlight { .. }) => Err(ApiError::IdempotencyKeyReused),
        // Only a plain claim answers this, and it was handled above.
        Ok(Claim::Unknown) => Err(ApiError::UnknownIdempotencyKey),
        Err(error) => {
            if !matches!(error, RedisCallError::Down) {
                tracing::warn!(%error, "Redis unavailable while claiming a token");
            }
            // A used token is still answered from PostgreSQL; a new one cannot be verified
            // as unused without Redis.
            match stored_outcome(state, token).await? {
                Some(first) => replay(first, fingerprint),
                None => Err(ApiError::Unavailable("redis")),
            }
        }
    };
    Ok(Some(answer))
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
