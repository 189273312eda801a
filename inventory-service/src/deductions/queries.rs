//! The `deductions` table (the first outcome of every deduction id, kept for replays) and
//! `apply_deductions`, the database function (migration 0004) that reads, judges and writes a
//! whole batch of deductions in one call: one round trip and, sent alone, one commit.

use shared::events::RejectionReason;
use shared::ids::ProductId;
use sqlx::PgConnection;

use super::request::{DeductionStatus, UnknownStatus};
use crate::replay::StoredResponse;

/// The first outcome of a deduction id, as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDeduction {
    pub status: DeductionStatus,
    /// Set exactly when `status` is rejected.
    pub rejection_reason: Option<RejectionReason>,
    pub response_status: i16,
    pub response_body: Vec<u8>,
}

/// One request of a batch, ready for [`apply_batch`].
#[derive(Debug, Clone)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    /// The canonical items, stored for audits.
    pub items: serde_json::Value,
    /// One per product of the batch, in the batch's (ascending) order.
    pub quantities: Vec<i64>,
    /// What it answers if applied.
    pub applied: StoredResponse,
}

/// What a refusal by each product of the batch answers; one per product, in the batch's
/// order. A refusal's body names the product and the reason, not the request.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    pub short: Vec<StoredResponse>,
    pub unknown: Vec<StoredResponse>,
}

/// What one request of a batch got, in the words `apply_deductions` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The first request with its id: its outcome was recorded now, and is answered.
    First(StoredDeduction),
    /// Repeats, with the same items, an id first used earlier in the same batch.
    Same(StoredDeduction),
    /// Its id was recorded before this batch, with the same items.
    Stored(StoredDeduction),
    /// Its id was used before (stored, or earlier in this batch) with other items.
    Reused,
}

/// A row `apply_deductions` returned that this code does not know how to read: a schema
/// drift, never guessed about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("apply_deductions returned {0}")]
pub struct UnknownVerdict(pub String);

impl From<UnknownStatus> for UnknownVerdict {
    fn from(error: UnknownStatus) -> Self {
        Self(error.to_string())
    }
}

/// One row as `apply_deductions` returns it. sqlx takes every column of a function's result
/// for nullable; the statement declares the two the function always sets (`ordinal!`,
/// `verdict!`), the others stay optional and [`VerdictRow::read`] judges them.
#[derive(Debug, Clone)]
pub struct VerdictRow {
    pub ordinal: i32,
    pub verdict: String,
    pub status: Option<String>,
    pub rejection_reason: Option<String>,
    pub response_status: Option<i16>,
    pub response_body: Option<Vec<u8>>,
}

impl VerdictRow {
    /// Reads the row strictly: an unknown verdict, status or reason, a missing recorded row
    /// or a reason that does not match the status is an error.
    pub fn read(self) -> Result<Verdict, UnknownVerdict> {
        if self.verdict == "reused" {
            return Ok(Verdict::Reused);
        }
        let (Some(status), Some(response_status), Some(response_body)) =
            (self.status, self.response_status, self.response_body)
        else {
            return Err(UnknownVerdict(format!(
                "a {:?} verdict without its recorded row",
                self.verdict
            )));
        };
        let status = DeductionStatus::parse(&status)?;
        let rejection_reason = match (status, self.rejection_reason.as_deref()) {
            (DeductionStatus::Applied, None) => None,
            (DeductionStatus::Rejected, Some(raw)) => Some(
                RejectionReason::parse(raw)
                    .ok_or_else(|| UnknownVerdict(format!("rejection reason {raw:?}")))?,
            ),
            (status, reason) => {
                return Err(UnknownVerdict(format!(
                    "a {status:?} deduction with rejection reason {reason:?}"
                )));
            }
        };
        let stored = StoredDeduction {
            status,
            rejection_reason,
            response_status,
            response_body,
        };
        match self.verdict.as_str() {
            "first" => Ok(Verdict::First(stored)),
            "same" => Ok(Verdict::Same(stored)),
            "stored" => Ok(Verdict::Stored(stored)),
            other => Err(UnknownVerdict(format!("verdict {other:?}"))),
        }
    }
}

/// Applies a batch: every request of `deductions` names exactly `products` (ascending), and
/// is judged in order against the stock the earlier ones left. One verdict per request, in
/// order. Sent on a connection outside a transaction, the call is its own transaction: when
/// it returns, its outcomes are committed (and, with `synchronous_commit` on, durable).
///
/// A serialization failure (40001) means another writer recorded one of these ids meanwhile
/// (nothing was written; try again and its id replays).
pub async fn apply_batch(
    conn: &mut PgConnection,
    products: &[ProductId],
    deductions: &[NewDeduction<'_>],
    refusals: &Refusals,
) -> sqlx::Result<Vec<Verdict>> {
    let products: Vec<i64> = products.iter().map(|p| p.0).collect();
    let ids: Vec<&str> = deductions.iter().map(|d| d.deduction_id).collect();
    let fingerprints: Vec<&str> = deductions.iter().map(|d| d.fingerprint).collect();
    let items: Vec<&serde_json::Value> = deductions.iter().map(|d| &d.items).collect();
    let quantities: Vec<i64> = deductions
        .iter()
        .flat_map(|d| d.quantities.iter().copied())
        .collect();
    let applied: Vec<&[u8]> = deductions
        .iter()
        .map(|d| d.applied.body.as_slice())
        .collect();
    let (short, unknown) = (bodies(&refusals.short), bodies(&refusals.unknown));
    let rows = sqlx::query_as!(
        VerdictRow,
        r#"SELECT ordinal AS "ordinal!", verdict AS "verdict!", status, rejection_reason,
                  response_status, response_body
           FROM apply_deductions($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"#,
        &products,
        &ids as &[&str],
        &fingerprints as &[&str],
        &items as &[&serde_json::Value],
        &quantities,
        one_status(deductions.iter().map(|d| &d.applied))?,
        &applied as &[&[u8]],
        one_status(&refusals.short)?,
        &short as &[&[u8]],
        one_status(&refusals.unknown)?,
        &unknown as &[&[u8]],
    )
    .fetch_all(conn)
    .await?;
    if rows.len() != deductions.len()
        || rows
            .iter()
            .zip(1..)
            .any(|(row, ordinal)| row.ordinal != ordinal)
    {
        return Err(decode(UnknownVerdict(format!(
            "{} rows out of order for {} requests",
            rows.len(),
            deductions.len()
        ))));
    }
    rows.into_iter()
        .map(|row| row.read().map_err(decode))
        .collect()
}

/// The one HTTP status that responses of a kind share (the function stores one per kind).
fn one_status<'a>(responses: impl IntoIterator<Item = &'a StoredResponse>) -> sqlx::Result<i16> {
    let mut statuses = responses.into_iter().map(|r| r.status.as_u16());
    let first = statuses.next().unwrap_or(500);
    if statuses.any(|s| s != first) {
        return Err(sqlx::Error::Protocol(
            "responses of one kind with different statuses".to_owned(),
        ));
    }
    i16::try_from(first).map_err(|_| sqlx::Error::Protocol(format!("status {first}")))
}

fn bodies(responses: &[StoredResponse]) -> Vec<&[u8]> {
    responses.iter().map(|r| r.body.as_slice()).collect()
}

fn decode(error: UnknownVerdict) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(verdict: &str, status: Option<&str>, reason: Option<&str>) -> VerdictRow {
        VerdictRow {
            ordinal: 1,
            verdict: verdict.to_owned(),
            status: status.map(str::to_owned),
            rejection_reason: reason.map(str::to_owned),
            response_status: status.map(|_| 409),
            response_body: status.map(|_| b"{}".to_vec()),
        }
    }

    #[test]
    fn a_returned_row_is_read_strictly() {
        let refused = row("first", Some("REJECTED"), Some("insufficient_stock")).read();
        assert!(matches!(
            refused,
            Ok(Verdict::First(StoredDeduction {
                rejection_reason: Some(RejectionReason::InsufficientStock),
                ..
            }))
        ));
        assert!(matches!(
            row("same", Some("APPLIED"), None).read(),
            Ok(Verdict::Same(_))
        ));
        assert!(matches!(
            row("stored", Some("APPLIED"), None).read(),
            Ok(Verdict::Stored(_))
        ));
        assert_eq!(row("reused", None, None).read(), Ok(Verdict::Reused));

        for odd in [
            row("partial", Some("APPLIED"), None),
            row("FIRST", Some("APPLIED"), None),
            row("first", Some("PARTIAL"), None),
            row("first", Some("REJECTED"), Some("out_of_stock")),
            row("first", Some("REJECTED"), None),
            row("first", Some("APPLIED"), Some("unknown_product")),
            row("stored", None, None),
        ] {
            assert!(odd.clone().read().is_err(), "{odd:?}");
        }
    }
}
