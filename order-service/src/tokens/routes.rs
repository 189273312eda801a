//! `POST /idempotency-tokens`: hands out the single-use keys of `POST /orders`.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use platform::http::Json;
use platform::storage::redis::health::RedisCallError;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;
use crate::identity::Caller;
use crate::state::AppState;

/// A single-use key for `POST /orders`.
#[derive(Debug, Serialize, ToSchema)]
pub struct IssuedToken {
    pub token: Uuid,
    /// After this instant an unused token is refused.
    pub expires_at: DateTime<Utc>,
}

/// Issue an idempotency token
///
/// Send it as `Idempotency-Key` with `POST /orders`; retries with the same token and body
/// replay the first response instead of creating a second order. With end-user identity on,
/// the token belongs to the caller: another user presenting it is refused.
#[utoipa::path(
    post, path = "/idempotency-tokens", operation_id = "issue_idempotency_token", tag = "orders",
    security((), ("bearerJwt" = [])),
    responses(
        (status = 201, description = "Token issued", body = IssuedToken),
        (status = 401, description = "`unauthorized`: identity is on and the bearer token is missing or invalid", body = shared::Problem, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer`, with `error=\"invalid_token\"` when a token was sent"))),
        (status = 503, description = "Redis unreachable", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn issue(
    caller: Caller,
    State(state): State<AppState>,
) -> Result<(StatusCode, Json<IssuedToken>), ApiError> {
    let (token, expires_at) = state.tokens.issue(caller.0).await.map_err(|error| {
        if !matches!(error, RedisCallError::Down) {
            tracing::warn!(%error, "cannot issue a token: Redis unavailable");
        }
        ApiError::Unavailable("redis")
    })?;
    Ok((StatusCode::CREATED, Json(IssuedToken { token, expires_at })))
}
