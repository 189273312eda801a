//! [`read`]: what a batch is judged against, in one round trip.

use platform::storage::Conn;
use shared::events::RejectionReason;
use shared::ids::ProductId;

use super::{AttemptTx, Read, Stored, StoredDeduction};
use crate::deductions::request::{DeductionStatus, Kind};
use crate::stock::queries::StockRow;

/// One row of [`read`]: a product's stock, or a stored deduction or hold (the other columns
/// NULL).
struct ReadRow {
    kind: String,
    product_id: Option<i64>,
    stock: Option<i64>,
    version: Option<i64>,
    request_id: Option<String>,
    fingerprint: Option<String>,
    status: Option<String>,
    rejection_reason: Option<String>,
    response_status: Option<i16>,
    response_body: Option<Vec<u8>>,
}

/// The stock of `products` and the stored outcomes of `deductions` and `holds`, in one round
/// trip. On PostgreSQL a snapshot, not a lock: [`record`] writes only if the stock read is
/// still there. On MySQL the products are locked until `tx` ends ([`AttemptTx`]).
///
/// [`record`]: super::record
pub async fn read(
    tx: &mut AttemptTx<'_>,
    products: &[ProductId],
    deductions: &[&str],
    holds: &[&str],
) -> sqlx::Result<Read> {
    let products: Vec<i64> = products.iter().map(|p| p.0).collect();
    let conn = match tx.conn() {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let read =
                inventory_mysql::deductions::read(conn, &products, deductions, holds).await?;
            return read_rows(mysql_rows(read));
        }
    };
    // Three kinds of row in one statement: a round trip less for every batch. A hold's try
    // that held something is APPLIED here, whatever became of the hold since: its first
    // outcome is what a repeat answers.
    let rows = sqlx::query_as!(
        ReadRow,
        r#"SELECT 'product'::text AS "kind!", p.product_id AS "product_id?", p.stock AS "stock?",
                  p.version AS "version?", NULL::text AS "request_id?", NULL::text AS "fingerprint?",
                  NULL::text AS "status?", NULL::text AS "rejection_reason?",
                  NULL::smallint AS "response_status?", NULL::bytea AS "response_body?"
             FROM products AS p WHERE p.product_id = ANY($1)
           UNION ALL
           SELECT 'deduction', NULL, NULL, NULL, d.deduction_id, d.fingerprint, d.status,
                  d.rejection_reason, d.response_status, d.response_body
             FROM deductions AS d WHERE d.deduction_id = ANY($2)
           UNION ALL
           SELECT 'hold', NULL, NULL, NULL, h.hold_id, h.fingerprint,
                  CASE h.state WHEN 'REFUSED' THEN 'REJECTED' ELSE 'APPLIED' END,
                  h.rejection_reason, h.response_status, h.response_body
             FROM holds AS h WHERE h.hold_id = ANY($3)"#,
        &products,
        deductions as &[&str],
        holds as &[&str],
    )
    .fetch_all(conn)
    .await?;
    read_rows(rows)
}

/// MySQL's answer as the rows of PostgreSQL's statement, read by the same strict rules.
fn mysql_rows(read: inventory_mysql::deductions::Read) -> Vec<ReadRow> {
    let products = read.stock.into_iter().map(|(id, row)| ReadRow {
        kind: "product".to_owned(),
        product_id: Some(id),
        stock: Some(row.stock),
        version: Some(row.version),
        request_id: None,
        fingerprint: None,
        status: None,
        rejection_reason: None,
        response_status: None,
        response_body: None,
    });
    let stored = read.stored.into_iter().map(|row| ReadRow {
        kind: match row.kind {
            inventory_mysql::deductions::IdKind::Deduction => "deduction",
            inventory_mysql::deductions::IdKind::Hold => "hold",
        }
        .to_owned(),
        product_id: None,
        stock: None,
        version: None,
        request_id: Some(row.id),
        fingerprint: row.fingerprint,
        status: row.status,
        rejection_reason: row.rejection_reason,
        response_status: row.response_status,
        response_body: row.response_body,
    });
    products.chain(stored).collect()
}

/// What a batch is judged against, from the rows of [`read`].
fn read_rows(rows: Vec<ReadRow>) -> sqlx::Result<Read> {
    let mut read = Read::default();
    for row in rows {
        let kind = match row.kind.as_str() {
            "product" => {
                let (Some(id), Some(stock), Some(version)) =
                    (row.product_id, row.stock, row.version)
                else {
                    return Err(decode("a product row without its stock"));
                };
                read.stock
                    .push((ProductId(id), StockRow { stock, version }));
                continue;
            }
            "deduction" => Kind::Sale,
            "hold" => Kind::Hold,
            other => return Err(decode(&format!("a row of unknown kind {other:?}"))),
        };
        let id = row
            .request_id
            .clone()
            .ok_or_else(|| decode("a stored row without its id"))?;
        let stored = stored_row(row).map_err(|e| decode(&e))?;
        read.stored.insert((kind, id), stored);
    }
    Ok(read)
}

fn decode(message: &str) -> sqlx::Error {
    sqlx::Error::Decode(message.to_owned().into())
}

/// A stored deduction or hold: a first outcome, or a tombstone (a hold row without a body).
fn stored_row(row: ReadRow) -> Result<Stored, String> {
    match row {
        ReadRow {
            fingerprint: Some(fingerprint),
            status: Some(status),
            rejection_reason,
            response_status: Some(response_status),
            response_body: Some(response_body),
            ..
        } => {
            let (status, rejection_reason) =
                stored_outcome(&status, rejection_reason.as_deref(), response_status)?;
            Ok(Stored::First {
                fingerprint,
                outcome: StoredDeduction {
                    status,
                    rejection_reason,
                    response_status,
                    response_body,
                },
            })
        }
        ReadRow {
            kind,
            fingerprint: None,
            response_status: None,
            response_body: None,
            ..
        } if kind == "hold" => Ok(Stored::Cancelled),
        _ => Err("a stored row that is neither an outcome nor a tombstone".to_owned()),
    }
}

/// Reads a stored status and reason strictly: an unknown value, or a reason that does not
/// match the status, is an error, never a default (the CHECK constraints admit nothing else,
/// so one means a schema drift).
fn stored_outcome(
    status: &str,
    reason: Option<&str>,
    response_status: i16,
) -> Result<(DeductionStatus, Option<RejectionReason>), String> {
    let status = DeductionStatus::parse(status).map_err(|e| e.to_string())?;
    match (status, reason) {
        (DeductionStatus::Applied, None) => Ok((status, None)),
        (DeductionStatus::Rejected, Some(raw)) => RejectionReason::parse(raw)
            .map(|reason| (status, Some(reason)))
            .ok_or_else(|| format!("unknown rejection reason {raw:?}")),
        (status, reason) => Err(format!(
            "a {status:?} deduction with rejection reason {reason:?} (response {response_status})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_outcome_is_read_strictly() {
        let refused = stored_outcome("REJECTED", Some("insufficient_stock"), 409);
        assert_eq!(
            refused,
            Ok((
                DeductionStatus::Rejected,
                Some(RejectionReason::InsufficientStock)
            ))
        );
        assert_eq!(
            stored_outcome("APPLIED", None, 200),
            Ok((DeductionStatus::Applied, None))
        );
        for (status, reason) in [
            ("PARTIAL", None),
            ("applied", None),
            ("REJECTED", Some("out_of_stock")),
            ("REJECTED", None),
            ("APPLIED", Some("unknown_product")),
        ] {
            assert!(
                stored_outcome(status, reason, 200).is_err(),
                "{status} {reason:?}"
            );
        }
    }
}
