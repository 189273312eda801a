//! [`super::record`] on MySQL: the batch's rows handed to the statements of
//! `inventory_mysql::deductions::record` and what they wrote turned back into the parent's
//! types. MySQL has no data-modifying CTEs, so no one statement writes the batch there; the
//! adapter lives apart so the parent holds PostgreSQL's statement and the choice between the two.

use inventory_mysql::deductions;
use shared::events::RejectionReason;
use shared::ids::ProductId;
use sqlx::MySqlConnection;

use super::{Outcomes, Recorded};
use crate::holds::queries::HoldRow;
use crate::stock::queries::{Change, StockRow};

/// [`super::record`] on MySQL: the same rows and guards, a guard that fell short the same
/// serialization failure (40001), after which the caller rolls the attempt's transaction
/// back (`conn` is inside it), undoing the statements before.
pub(super) async fn record(
    conn: &mut MySqlConnection,
    judged: &[(ProductId, StockRow)],
    changes: &[Change],
    new: &Outcomes<'_>,
) -> sqlx::Result<Recorded> {
    let judged: Vec<(i64, inventory_mysql::StockRow)> = judged
        .iter()
        .map(|(id, row)| (id.0, (*row).into()))
        .collect();
    let changes: Vec<inventory_mysql::Change> = changes.iter().map(|c| (*c).into()).collect();
    let units: Vec<Option<Vec<inventory_mysql::Unit>>> = new
        .holds
        .iter()
        .map(|h| {
            h.held.map(|items| {
                items
                    .iter()
                    .map(|item| inventory_mysql::Unit {
                        product_id: item.product_id.0,
                        quantity: item.quantity,
                    })
                    .collect()
            })
        })
        .collect();
    let outcomes = deductions::Outcomes {
        deductions: new
            .deductions
            .iter()
            .map(|d| deductions::NewDeduction {
                deduction_id: d.deduction_id,
                fingerprint: d.fingerprint,
                items: &d.items,
                status: d.outcome.status.as_str(),
                rejection_reason: d.outcome.rejection_reason.map(RejectionReason::as_str),
                response_status: d.outcome.response_status,
                response_body: &d.outcome.response_body,
            })
            .collect(),
        holds: new
            .holds
            .iter()
            .zip(&units)
            .map(|(h, units)| deductions::NewHold {
                hold_id: h.hold_id,
                fingerprint: h.fingerprint,
                items: &h.items,
                rejection_reason: h.outcome.rejection_reason.map(RejectionReason::as_str),
                response_status: h.outcome.response_status,
                response_body: &h.outcome.response_body,
                held: units.as_deref(),
                created_at: h.created_at,
                expires_at: h.expires_at,
            })
            .collect(),
        confirms: new.confirms.clone(),
        cancels: new.cancels.clone(),
    };
    let recorded = deductions::record(conn, &judged, &changes, &outcomes).await?;
    Ok(Recorded {
        written: recorded
            .written
            .into_iter()
            .map(|(id, row)| (ProductId(id), row.into()))
            .collect(),
        decided: recorded.decided.into_iter().map(HoldRow::from).collect(),
    })
}
