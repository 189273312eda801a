//! What a deduction or a hold's try answers: the first response of an id (stored byte for
//! byte with its outcome) and the replay of a stored one.

use anyhow::{Context, anyhow};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use shared::Problem;
use shared::events::RejectionReason;
use shared::ids::ProductId;

use super::{AppliedStatus, DeductionApplied};

use super::error::DeductionError;
use super::queries::StoredDeduction;
use super::request::{DeductionRequest, DeductionStatus, Kind, Take};
use super::verdict::Verdict;
use crate::holds::view::{Hold, HoldState};
use crate::metrics;
use crate::replay::StoredResponse;
use crate::stock::engine::Refusal;

/// What one request of a batch is answered.
pub type Answer = Result<StoredResponse, DeductionError>;

/// What a first request's answer is, as its row keeps it; a hold is stamped `now`.
pub fn outcome(
    request: &DeductionRequest,
    taken: Result<(), Refusal>,
    now: DateTime<Utc>,
) -> Result<StoredDeduction, DeductionError> {
    let (status, rejection_reason, response) = match taken {
        Ok(()) => (
            DeductionStatus::Applied,
            None,
            applied_response(request, now)?,
        ),
        Err(refusal) => (
            DeductionStatus::Rejected,
            Some(refusal.reason),
            refusal_response(refusal.reason, refusal.product_id, request.take.kind())?,
        ),
    };
    Ok(StoredDeduction {
        status,
        rejection_reason,
        response_status: i16::try_from(response.status.as_u16())
            .map_err(|_| anyhow!("response status {}", response.status))?,
        response_body: response.body,
    })
}

/// What `request` answers if it is applied, as it will be stored: a deduction its items, a
/// hold itself, `HELD` from `now` for its TTL.
pub fn applied_response(
    request: &DeductionRequest,
    now: DateTime<Utc>,
) -> Result<StoredResponse, DeductionError> {
    let items = request.items.as_slice().to_vec();
    let (status, body) = match request.take {
        Take::Sale => (
            StatusCode::OK,
            serde_json::to_vec(&DeductionApplied {
                deduction_id: request.id.as_str().to_owned(),
                status: AppliedStatus::Applied,
                items,
            }),
        ),
        Take::Hold { ttl_secs } => (
            StatusCode::CREATED,
            serde_json::to_vec(&Hold {
                hold_id: request.id.as_str().to_owned(),
                state: HoldState::Held,
                items,
                expires_at: Some(now + TimeDelta::seconds(ttl_secs)),
                created_at: now,
                updated_at: now,
            }),
        ),
    };
    let body = body.context("serialising an applied deduction")?;
    Ok(StoredResponse::first(status, body))
}

/// What a request refused because of `product_id` answers, as it will be stored. It names
/// the product, not the request, so one serves every request of a batch.
pub fn refusal_response(
    reason: RejectionReason,
    product_id: ProductId,
    kind: Kind,
) -> Result<StoredResponse, DeductionError> {
    let (what, nothing) = match kind {
        Kind::Sale => ("deduction", "nothing was deducted"),
        Kind::Hold => ("hold", "nothing was held"),
    };
    let problem = match reason {
        RejectionReason::InsufficientStock => Problem::new(
            StatusCode::CONFLICT,
            "insufficient-stock",
            "Insufficient stock",
            format!("product {product_id} has too little stock for this {what}; {nothing}"),
        ),
        RejectionReason::UnknownProduct => Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-product",
            "Unknown product",
            format!("product {product_id} does not exist; {nothing}"),
        ),
    };
    let body = serde_json::to_vec(&problem).context("serialising a refused deduction")?;
    Ok(StoredResponse::first(problem.status_code(), body))
}

/// The answer of one request of a batch, counted in its kind's metrics.
pub fn answer(verdict: Verdict, kind: Kind) -> Answer {
    match verdict {
        Verdict::First(stored) => first(stored, kind),
        Verdict::Same(stored) | Verdict::Stored(stored) => replay(stored, kind),
        Verdict::Reused => Err(reused()),
        Verdict::Cancelled => {
            metrics::hold_refused("cancelled");
            Err(DeductionError::HoldCancelled)
        }
    }
}

/// The answer recorded just now for the first request of an id.
pub fn first(stored: StoredDeduction, kind: Kind) -> Answer {
    let response = checked(&stored)?;
    match (kind, stored.rejection_reason) {
        (Kind::Sale, None) => metrics::deduction("applied"),
        (Kind::Sale, Some(reason)) => metrics::deduction(reason.as_str()),
        (Kind::Hold, None) => metrics::hold_transition(HoldState::Held),
        (Kind::Hold, Some(reason)) => metrics::hold_refused(reason.as_str()),
    }
    Ok(StoredResponse::first(response, stored.response_body))
}

/// The stored first answer of an id, sent again.
pub fn replay(stored: StoredDeduction, kind: Kind) -> Answer {
    let status = checked(&stored)?;
    if kind == Kind::Sale {
        metrics::deduction("replayed");
    }
    Ok(StoredResponse::again(status, stored.response_body))
}

/// The same failure for every request of the batch. Only the first carries the cause, so a
/// 5xx is logged with its cause once.
pub fn failed(error: DeductionError, size: usize) -> Vec<Answer> {
    match error {
        DeductionError::Busy(detail) => (0..size)
            .map(|_| Err(DeductionError::Busy(detail.clone())))
            .collect(),
        other => {
            let mut answers = vec![Err(other)];
            answers.extend((1..size).map(|_| {
                Err(anyhow!("another deduction of the same batch failed the batch").into())
            }));
            answers
        }
    }
}

/// The stored response status, once it agrees with the stored outcome: an applied deduction
/// answered 200 and a rejected one a problem; a row saying otherwise is corrupt, and sending
/// it would tell the client the wrong thing.
fn checked(stored: &StoredDeduction) -> Result<StatusCode, DeductionError> {
    let status = u16::try_from(stored.response_status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            anyhow!(
                "stored deduction status {} is not an HTTP status",
                stored.response_status
            )
        })?;
    if status.is_success() != (stored.status == DeductionStatus::Applied) {
        return Err(anyhow!(
            "stored deduction is {:?} but its response status is {status}",
            stored.status
        )
        .into());
    }
    Ok(status)
}

/// A deduction id repeated with other items.
pub fn reused() -> DeductionError {
    DeductionError::Reused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(status: DeductionStatus, response_status: i16) -> StoredDeduction {
        StoredDeduction {
            status,
            rejection_reason: (status == DeductionStatus::Rejected)
                .then_some(RejectionReason::InsufficientStock),
            response_status,
            response_body: b"{}".to_vec(),
        }
    }

    #[test]
    fn a_stored_outcome_replays_only_when_its_status_matches_its_response() {
        let again = replay(stored(DeductionStatus::Rejected, 409), Kind::Sale).expect("a replay");
        assert_eq!((again.status, again.replayed), (StatusCode::CONFLICT, true));
        assert!(replay(stored(DeductionStatus::Applied, 200), Kind::Sale).is_ok());
        assert!(replay(stored(DeductionStatus::Applied, 201), Kind::Hold).is_ok());
        assert!(replay(stored(DeductionStatus::Applied, 409), Kind::Sale).is_err());
        assert!(replay(stored(DeductionStatus::Rejected, 200), Kind::Hold).is_err());
        assert!(first(stored(DeductionStatus::Rejected, 200), Kind::Sale).is_err());
        let answered =
            first(stored(DeductionStatus::Applied, 200), Kind::Sale).expect("a first answer");
        assert!(!answered.replayed);
    }
}
