//! What a deduction answers: the first response of an id (stored byte for byte with its
//! outcome) and the replay of a stored one.

use anyhow::{Context, anyhow};
use axum::http::StatusCode;
use shared::Problem;
use shared::events::RejectionReason;

use super::{AppliedStatus, DeductionApplied};
use crate::db::deductions::{NewDeduction, StoredDeduction};
use crate::domain::deduction::{DeductionRequest, DeductionStatus, Outcome};
use crate::error::ApiError;
use crate::metrics;
use crate::replay::StoredResponse;

/// The response the first request with this id gets, as it will be stored.
pub fn first_response(
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

/// The row that keeps a deduction's first outcome.
pub fn recorded_as<'a>(
    request: &'a DeductionRequest,
    fingerprint: &'a str,
    outcome: Outcome,
    response: &'a StoredResponse,
) -> NewDeduction<'a> {
    let rejection_reason = match outcome {
        Outcome::Applied => None,
        Outcome::Rejected { reason, .. } => Some(reason.as_str()),
    };
    NewDeduction {
        deduction_id: request.id.as_str(),
        fingerprint,
        items: request.items.canonical_json(),
        status: DeductionStatus::from(outcome),
        rejection_reason,
        response_status: response.status.as_u16(),
        response_body: &response.body,
    }
}

/// The stored first answer of an id, sent again.
pub fn replay(stored: &StoredDeduction) -> Result<StoredResponse, ApiError> {
    let status = u16::try_from(stored.response_status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            anyhow!(
                "stored deduction status {} is not an HTTP status",
                stored.response_status
            )
        })?;
    // An applied deduction answered 200 and a rejected one a problem; a row saying otherwise
    // is corrupt, and replaying it would tell the client the wrong thing.
    if status.is_success() != (stored.status == DeductionStatus::Applied) {
        return Err(anyhow!(
            "stored deduction is {:?} but its response status is {status}",
            stored.status
        )
        .into());
    }
    metrics::deduction("replayed");
    Ok(StoredResponse::again(status, stored.response_body.clone()))
}

/// A deduction id repeated with other items.
pub fn reused() -> ApiError {
    ApiError::KeyReused("this deduction_id was already used with different items".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(status: DeductionStatus, response_status: i16) -> StoredDeduction {
        StoredDeduction {
            fingerprint: "f".to_owned(),
            status,
            response_status,
            response_body: b"{}".to_vec(),
        }
    }

    #[test]
    fn a_stored_outcome_replays_only_when_its_status_matches_its_response() {
        let again = replay(&stored(DeductionStatus::Rejected, 409)).expect("a replay");
        assert_eq!((again.status, again.replayed), (StatusCode::CONFLICT, true));
        assert!(replay(&stored(DeductionStatus::Applied, 200)).is_ok());
        assert!(replay(&stored(DeductionStatus::Applied, 409)).is_err());
        assert!(replay(&stored(DeductionStatus::Rejected, 200)).is_err());
    }
}
