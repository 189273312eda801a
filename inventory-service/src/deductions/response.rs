//! What a deduction answers: the first response of an id (stored byte for byte with its
//! outcome) and the replay of a stored one.

use anyhow::{Context, anyhow};
use axum::http::StatusCode;
use shared::Problem;
use shared::events::RejectionReason;
use shared::ids::ProductId;

use super::{AppliedStatus, DeductionApplied};

use super::error::DeductionError;
use super::queries::StoredDeduction;
use super::request::{DeductionRequest, DeductionStatus};
use crate::metrics;
use crate::replay::StoredResponse;

/// What `request` answers if it is applied, as it will be stored.
pub fn applied_response(request: &DeductionRequest) -> Result<StoredResponse, DeductionError> {
    let body = DeductionApplied {
        deduction_id: request.id.as_str().to_owned(),
        status: AppliedStatus::Applied,
        items: request.items.as_slice().to_vec(),
    };
    let body = serde_json::to_vec(&body).context("serialising an applied deduction")?;
    Ok(StoredResponse::first(StatusCode::OK, body))
}

/// What a deduction refused because of `product_id` answers, as it will be stored. It names
/// the product, not the request, so one serves every request of a batch.
pub fn refusal_response(
    reason: RejectionReason,
    product_id: ProductId,
) -> Result<StoredResponse, DeductionError> {
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
    let body = serde_json::to_vec(&problem).context("serialising a refused deduction")?;
    Ok(StoredResponse::first(problem.status_code(), body))
}

/// The answer recorded just now for the first request of an id.
pub fn first(stored: StoredDeduction) -> Result<StoredResponse, DeductionError> {
    let response = checked(&stored)?;
    metrics::deduction(match stored.rejection_reason {
        None => "applied",
        Some(reason) => reason.as_str(),
    });
    Ok(StoredResponse::first(response, stored.response_body))
}

/// The stored first answer of an id, sent again.
pub fn replay(stored: StoredDeduction) -> Result<StoredResponse, DeductionError> {
    let status = checked(&stored)?;
    metrics::deduction("replayed");
    Ok(StoredResponse::again(status, stored.response_body))
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
        let again = replay(stored(DeductionStatus::Rejected, 409)).expect("a replay");
        assert_eq!((again.status, again.replayed), (StatusCode::CONFLICT, true));
        assert!(replay(stored(DeductionStatus::Applied, 200)).is_ok());
        assert!(replay(stored(DeductionStatus::Applied, 409)).is_err());
        assert!(replay(stored(DeductionStatus::Rejected, 200)).is_err());
        assert!(first(stored(DeductionStatus::Rejected, 200)).is_err());
        let answered = first(stored(DeductionStatus::Applied, 200)).expect("a first answer");
        assert!(!answered.replayed);
    }
}
