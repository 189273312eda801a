//! `POST /deductions` end to end, and the retry policy shared by everything that deducts.
//!
//! One attempt is the sequence the message consumer reuses:
//! ```text
//! let locks = locker.acquire_all(&product_ids).await?;   // ascending ids; may be bypassed
//! let mut tx = pool.begin().await?;
//! let outcome = db::stock::deduct_all(&mut tx, items).await?;  // all or nothing (savepoint)
//! /* write the caller's own rows in tx: here the stored outcome */
//! locks.ensure_held()?;                                   // lost? roll back, retry
//! tx.commit().await?;
//! locks.release().await;
//! ```
//! A first request for one item the stock covers skips that transaction: the update and the
//! stored outcome go in one statement ([`crate::db::one_statement`]), which keeps a hot
//! product's lock short.
//!
//! A lost lock or a row that kept changing makes the attempt roll back; [`Retry`] spaces the
//! next one out with jitter and gives up (503 `busy`) after a bounded number or time.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use axum::http::StatusCode;
use serde::Serialize;
use shared::Problem;
use shared::events::{LineItem, RejectionReason};
use utoipa::ToSchema;

use crate::db;
use crate::db::deductions::{NewDeduction, StoredDeduction};
use crate::db::one_statement::Attempt;
use crate::db::stock::StockError;
use crate::domain::deduction::{DeductionRequest, Outcome};
use crate::error::ApiError;
use crate::lock::{LockError, Locks};
use crate::metrics;
use crate::replay::StoredResponse;
use crate::state::AppState;

/// The body of an applied deduction.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "deduction_id": "flash-2026-11-29-0001", "status": "APPLIED",
    "items": [{"product_id": 1001, "quantity": 1}]
}))]
pub struct DeductionApplied {
    pub deduction_id: String,
    pub status: AppliedStatus,
    /// The items deducted, in ascending product id.
    pub items: Vec<LineItem>,
}

/// Always `APPLIED`: a refused deduction answers a problem instead.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AppliedStatus {
    Applied,
}

/// Why one attempt did not finish.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Stock(#[from] StockError),
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<sqlx::Error> for AttemptError {
    fn from(error: sqlx::Error) -> Self {
        Self::Api(error.into())
    }
}

impl AttemptError {
    /// A lost race: the attempt changed nothing and another one may well succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Lock(LockError::Lost) | Self::Stock(StockError::Contended(_))
        )
    }
}

impl From<AttemptError> for ApiError {
    fn from(error: AttemptError) -> Self {
        match error {
            AttemptError::Lock(LockError::Timeout(waited)) => Self::Busy(format!(
                "the stock is locked by other deductions (waited {waited:?}); retry shortly"
            )),
            AttemptError::Lock(LockError::Lost) | AttemptError::Stock(StockError::Contended(_)) => {
                Self::Busy("the stock kept changing under this deduction; retry shortly".to_owned())
            }
            AttemptError::Stock(StockError::Database(error)) => error.into(),
            AttemptError::Api(error) => error,
        }
    }
}

/// Bounded retries with jittered exponential backoff, for attempts that lost a race.
#[derive(Debug)]
pub struct Retry {
    attempts: u32,
    deadline: Instant,
}

impl Retry {
    /// Attempts at most, counting the first.
    pub const MAX_ATTEMPTS: u32 = 10;
    const BASE: Duration = Duration::from_millis(5);
    const CAP: Duration = Duration::from_millis(200);

    /// Retries until `budget` has passed or [`Retry::MAX_ATTEMPTS`] were made.
    pub fn new(budget: Duration) -> Self {
        Self {
            attempts: 1,
            deadline: Instant::now() + budget,
        }
    }

    /// Waits before the next attempt; `false` when the budget is spent (then give up).
    pub async fn pause(&mut self) -> bool {
        let now = Instant::now();
        if self.attempts >= Self::MAX_ATTEMPTS || now >= self.deadline {
            return false;
        }
        let pause = platform::retry::backoff(self.attempts, Self::BASE, Self::CAP);
        self.attempts += 1;
        tokio::time::sleep(pause.min(self.deadline - now)).await;
        true
    }
}

/// Applies a deduction once per deduction id; a repeat gets the stored outcome.
pub async fn apply(
    state: &AppState,
    request: &DeductionRequest,
) -> Result<StoredResponse, ApiError> {
    // A known id needs no lock: answer from the stored outcome.
    let stored = db::deductions::find(&mut *state.db.acquire().await?, request.id.as_str()).await?;
    if let Some(stored) = stored {
        return replay(stored, request);
    }
    // Worked out before any lock is taken, so that the lock is held only for the database.
    let response = first_response(request, Outcome::Applied)?;
    let fingerprint = request.items.fingerprint();
    let applied = IfApplied {
        record: recorded_as(request, &fingerprint, Outcome::Applied, &response),
        response: &response,
    };
    let mut retry = Retry::new(state.locker.options().wait);
    loop {
        match attempt(state, request, &applied).await {
            Err(error) if error.is_retryable() && retry.pause().await => {
                tracing::debug!(%error, deduction_id = request.id.as_str(), "retrying a deduction");
            }
            result => return result.map_err(ApiError::from),
        }
    }
}

async fn attempt(
    state: &AppState,
    request: &DeductionRequest,
    applied: &IfApplied<'_>,
) -> Result<StoredResponse, AttemptError> {
    let locks = state
        .locker
        .acquire_all(&request.items.product_ids())
        .await?;
    let result = match deduct_in_one_statement(state, request, applied, &locks).await {
        Ok(Some(response)) => Ok(response),
        Ok(None) => deduct_and_record(state, request, &locks).await,
        Err(error) => Err(error),
    };
    locks.release().await;
    result
}

/// What a first request answers and records when the stock covers it.
struct IfApplied<'a> {
    response: &'a StoredResponse,
    record: NewDeduction<'a>,
}

/// The common case, a first request for one item that the stock covers, in one statement
/// ([`db::one_statement::deduct`]); `None` when that wrote nothing and the general path decides.
async fn deduct_in_one_statement(
    state: &AppState,
    request: &DeductionRequest,
    applied: &IfApplied<'_>,
    locks: &Locks,
) -> Result<Option<StoredResponse>, AttemptError> {
    let [item] = request.items.as_slice() else {
        return Ok(None);
    };
    // The statement commits as it runs, so this is the last moment to check.
    locks.ensure_held()?;
    let mut conn = state.db.acquire().await?;
    match db::one_statement::deduct(&mut conn, *item, &applied.record).await? {
        Attempt::Done => {
            metrics::deduction("applied");
            Ok(Some(applied.response.clone()))
        }
        Attempt::NotTaken => Ok(None),
    }
}

async fn deduct_and_record(
    state: &AppState,
    request: &DeductionRequest,
    locks: &Locks,
) -> Result<StoredResponse, AttemptError> {
    let mut tx = state.db.begin().await?;
    let outcome = db::stock::deduct_all(&mut tx, request.items.as_slice()).await?;
    let response = first_response(request, outcome)?;
    let fingerprint = request.items.fingerprint();
    let deduction = recorded_as(request, &fingerprint, outcome, &response);
    let recorded = db::deductions::insert(&mut tx, &deduction).await?;
    if !recorded {
        // A concurrent first request with this id committed first; ours changes nothing.
        tx.rollback().await?;
        let stored = db::deductions::find(&mut *state.db.acquire().await?, request.id.as_str())
            .await?
            .ok_or_else(|| {
                ApiError::from(anyhow!("a deduction id conflicted but its row is missing"))
            })?;
        return Ok(replay(stored, request)?);
    }
    locks.ensure_held()?;
    tx.commit().await?;
    metrics::deduction(deduction.rejection_reason.unwrap_or("applied"));
    Ok(response)
}

/// The row that keeps a deduction's first outcome.
fn recorded_as<'a>(
    request: &'a DeductionRequest,
    fingerprint: &'a str,
    outcome: Outcome,
    response: &'a StoredResponse,
) -> NewDeduction<'a> {
    let (status, rejection_reason) = match outcome {
        Outcome::Applied => ("APPLIED", None),
        Outcome::Rejected { reason, .. } => ("REJECTED", Some(reason.as_str())),
    };
    NewDeduction {
        deduction_id: request.id.as_str(),
        fingerprint,
        items: request.items.canonical_json(),
        status,
        rejection_reason,
        response_status: response.status.as_u16(),
        response_body: &response.body,
    }
}

/// The response the first request with this id gets, as it will be stored.
fn first_response(
    request: &DeductionRequest,
    outcome: Outcome,
) -> Result<StoredResponse, ApiError> {
    let (status, body) = match outcome {
        Outcome::Applied => {
            let body = DeductionApplied {
                deduction_id: request.id.as_str().to_owned(),
                status: AppliedStatus::Applied,
                items: request.items.as_slice().to_vec(),
            };
            (StatusCode::OK, serde_json::to_vec(&body))
        }
        Outcome::Rejected { reason, product_id } => {
            let problem = match reason {
                RejectionReason::InsufficientStock => Problem::new(
                    StatusCode::CONFLICT,
                    "insufficient-stock",
                    "Insufficient stock",
                    format!(
                        "product {product_id} has too little stock for this deduction; nothing was deducted"
                    ),
                ),
                RejectionReason::UnknownProduct => Problem::new(
                    StatusCode::NOT_FOUND,
                    "unknown-product",
                    "Unknown product",
                    format!("product {product_id} does not exist; nothing was deducted"),
                ),
            };
            (problem.status_code(), serde_json::to_vec(&problem))
        }
    };
    let body = body.context("serialising a deduction outcome")?;
    Ok(StoredResponse::first(status, body))
}

fn replay(stored: StoredDeduction, request: &DeductionRequest) -> Result<StoredResponse, ApiError> {
    if stored.fingerprint != request.items.fingerprint() {
        return Err(ApiError::KeyReused(
            "this deduction_id was already used with different items".to_owned(),
        ));
    }
    let status = u16::try_from(stored.response_status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            anyhow!(
                "stored deduction status {} is not an HTTP status",
                stored.response_status
            )
        })?;
    metrics::deduction("replayed");
    Ok(StoredResponse::again(status, stored.response_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retries_stop_when_the_budget_is_spent() {
        let mut retry = Retry::new(Duration::from_secs(60));
        let mut pauses = 0;
        while retry.pause().await {
            pauses += 1;
        }
        assert_eq!(pauses, Retry::MAX_ATTEMPTS - 1);
        assert!(!Retry::new(Duration::ZERO).pause().await);
    }

    #[test]
    fn only_lost_races_are_retried() {
        assert!(AttemptError::Lock(LockError::Lost).is_retryable());
        assert!(
            AttemptError::Stock(StockError::Contended(shared::ids::ProductId(1))).is_retryable()
        );
        assert!(!AttemptError::Lock(LockError::Timeout(Duration::from_secs(1))).is_retryable());
        assert!(!AttemptError::Api(ApiError::NotFound("x".into())).is_retryable());
    }
}
