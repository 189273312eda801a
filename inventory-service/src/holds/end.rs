//! Ending a hold: what a confirm, a cancel and a read of one answer, from the row its
//! statement returned — the batch of its products' when this process took it
//! ([`crate::deductions`]), else [`super::queries`] by way of [`super::batched`]. The
//! statement decides; this only words it.

use chrono::{DateTime, Utc};
use platform::storage::Database;
use shared::events::LineItem;

use super::batched::Ends;
use super::error::HoldError;
use super::queries::{self, HoldRow};
use super::step::Step;
use super::view::{Hold, HoldState};
use crate::deductions::Deductions;
use crate::metrics;

/// How often a confirm or cancel runs again when a try or cancel of the same id committed while
/// its statement ran (it then saw a snapshot from before): the next run sees it.
const ATTEMPTS: usize = 3;

/// `GET /holds/{hold_id}`.
pub async fn find(db: &Database, hold_id: &str) -> Result<Hold, HoldError> {
    let row = queries::find(db.acquire().await?.conn(), hold_id).await?;
    row.as_ref()
        .and_then(|row| shown(row).transpose())
        .transpose()?
        .ok_or_else(|| HoldError::NotFound(hold_id.to_owned()))
}

/// `POST /holds/{hold_id}/confirm`: `CONFIRMED` (again: the same), or why not.
pub async fn confirm(
    deductions: &Deductions,
    ends: &Ends,
    hold_id: &str,
) -> Result<Hold, HoldError> {
    // A hold taken here is confirmed in its products' next batch; one that batch did not
    // confirm (and every other) is decided, and any refusal worded, the general way.
    let mut in_batch = deductions.end(Step::Confirm, hold_id).await;
    for _ in 0..ATTEMPTS {
        let not_found = || HoldError::NotFound(hold_id.to_owned());
        let row = match in_batch.take() {
            Some(row) => row,
            None => ends
                .run(Step::Confirm, hold_id)
                .await?
                .ok_or_else(not_found)?,
        };
        let hold = shown(&row)?.ok_or_else(not_found)?;
        match hold.state {
            HoldState::Confirmed => {
                if row.changed {
                    metrics::hold_transition(HoldState::Confirmed);
                }
                return Ok(hold);
            }
            HoldState::Held if !row.due => continue,
            HoldState::Held | HoldState::Expired => {
                let deadline = hold.expires_at.unwrap_or(hold.updated_at);
                return Err(HoldError::Expired(hold.hold_id, deadline));
            }
            HoldState::Cancelled => return Err(HoldError::Cancelled(hold.hold_id)),
        }
    }
    Err(anyhow::anyhow!("hold {hold_id:?} kept changing under its confirm").into())
}

/// `POST /holds/{hold_id}/cancel`: `CANCELLED` with the units back (again: the same), `EXPIRED`
/// when the deadline passed first, a tombstone when no try came yet, or why not.
pub async fn cancel(
    deductions: &Deductions,
    ends: &Ends,
    hold_id: &str,
) -> Result<Hold, HoldError> {
    let mut in_batch = deductions.end(Step::Cancel, hold_id).await;
    for _ in 0..ATTEMPTS {
        let row = match in_batch.take() {
            Some(row) => Some(row),
            None => ends.run(Step::Cancel, hold_id).await?,
        };
        let Some(row) = row else {
            continue;
        };
        let Some(hold) = shown(&row)? else {
            // A refused try held nothing: there is nothing to give back, and its row stays so
            // that a repeat of the try still answers its refusal.
            return Ok(nothing_held(hold_id, row.updated_at));
        };
        match hold.state {
            HoldState::Cancelled | HoldState::Expired => {
                if row.changed {
                    metrics::hold_transition(hold.state);
                }
                return Ok(hold);
            }
            HoldState::Confirmed => return Err(HoldError::Confirmed(hold.hold_id)),
            // The statement found it HELD only in its snapshot: it changed meanwhile.
            HoldState::Held if !row.due => continue,
            HoldState::Held => {
                return Ok(Hold {
                    state: HoldState::Expired,
                    ..hold
                });
            }
        }
    }
    Err(anyhow::anyhow!("hold {hold_id:?} kept changing under its cancel").into())
}

/// The hold a row shows: `None` for a refused try, which holds nothing.
fn shown(row: &HoldRow) -> Result<Option<Hold>, HoldError> {
    if row.state == "REFUSED" {
        return Ok(None);
    }
    let state = HoldState::parse(&row.state)
        .ok_or_else(|| anyhow::anyhow!("unknown hold state {:?}", row.state))?;
    let items: Vec<LineItem> = serde_json::from_value(row.items.clone())
        .map_err(|e| anyhow::anyhow!("stored items of hold {:?}: {e}", row.hold_id))?;
    Ok(Some(Hold {
        hold_id: row.hold_id.clone(),
        state,
        items,
        expires_at: row.expires_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }))
}

/// The answer to a cancel of a try that held nothing.
fn nothing_held(hold_id: &str, at: DateTime<Utc>) -> Hold {
    Hold {
        hold_id: hold_id.to_owned(),
        state: HoldState::Cancelled,
        items: Vec::new(),
        expires_at: None,
        created_at: at,
        updated_at: at,
    }
}
