//! The `deductions` table (the first outcome of every deduction id, kept for replays) and the
//! two statements a batch of deductions costs: [`read`], the stock of its products with the
//! stored outcomes of its ids, and [`record`], the stock change with the new outcomes, all or
//! nothing. A batch that follows another of the same products skips the read (see
//! `super::batch`): one statement then. Each is sent on a connection outside a transaction, so each is its own
//! transaction: when [`record`] returns, the batch is committed (and, with
//! `synchronous_commit` on, durable).
//!
//! Every statement is checked against the migrations at build time (`sqlx::query!`).

use std::collections::HashMap;

use shared::events::RejectionReason;
use shared::ids::ProductId;
use sqlx::PgConnection;

use super::request::DeductionStatus;
use crate::stock::queries::{Change, StockRow};

/// The first outcome of a deduction id, as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDeduction {
    pub status: DeductionStatus,
    /// Set exactly when `status` is rejected.
    pub rejection_reason: Option<RejectionReason>,
    pub response_status: i16,
    pub response_body: Vec<u8>,
}

/// A stored outcome with the fingerprint of the items its id was first used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub fingerprint: String,
    pub outcome: StoredDeduction,
}

/// What a batch reads before it is judged.
#[derive(Debug, Clone, Default)]
pub struct Read {
    /// The products of the batch that exist, with the version they were read at.
    pub stock: Vec<(ProductId, StockRow)>,
    /// The ids of the batch stored before it, by id.
    pub stored: HashMap<String, Stored>,
}

/// One row of [`read`]: a product's stock, or a stored deduction (the other columns NULL).
struct ReadRow {
    product_id: Option<i64>,
    stock: Option<i64>,
    version: Option<i64>,
    deduction_id: Option<String>,
    fingerprint: Option<String>,
    status: Option<String>,
    rejection_reason: Option<String>,
    response_status: Option<i16>,
    response_body: Option<Vec<u8>>,
}

/// The stock of `products` and the stored outcomes of `ids`, in one round trip. A snapshot,
/// not a lock: [`record`] writes only if the stock read is still there.
pub async fn read(
    conn: &mut PgConnection,
    products: &[ProductId],
    ids: &[&str],
) -> sqlx::Result<Read> {
    let products: Vec<i64> = products.iter().map(|p| p.0).collect();
    // Two kinds of row in one statement: a round trip less for every batch.
    let rows = sqlx::query_as!(
        ReadRow,
        r#"SELECT p.product_id AS "product_id?", p.stock AS "stock?", p.version AS "version?",
                  NULL::text AS "deduction_id?", NULL::text AS "fingerprint?",
                  NULL::text AS "status?", NULL::text AS "rejection_reason?",
                  NULL::smallint AS "response_status?", NULL::bytea AS "response_body?"
             FROM products AS p WHERE p.product_id = ANY($1)
           UNION ALL
           SELECT NULL, NULL, NULL, d.deduction_id, d.fingerprint, d.status, d.rejection_reason,
                  d.response_status, d.response_body
             FROM deductions AS d WHERE d.deduction_id = ANY($2)"#,
        &products,
        ids as &[&str],
    )
    .fetch_all(conn)
    .await?;
    let mut read = Read::default();
    for row in rows {
        match row {
            ReadRow {
                product_id: Some(id),
                stock: Some(stock),
                version: Some(version),
                ..
            } => read
                .stock
                .push((ProductId(id), StockRow { stock, version })),
            ReadRow {
                deduction_id: Some(id),
                fingerprint: Some(fingerprint),
                status: Some(status),
                rejection_reason,
                response_status: Some(response_status),
                response_body: Some(response_body),
                ..
            } => {
                let outcome = stored_outcome(&status, rejection_reason.as_deref(), response_status)
                    .map(|(status, rejection_reason)| StoredDeduction {
                        status,
                        rejection_reason,
                        response_status,
                        response_body,
                    })
                    .map_err(|e| sqlx::Error::Decode(e.into()))?;
                read.stored.insert(
                    id,
                    Stored {
                        fingerprint,
                        outcome,
                    },
                );
            }
            _ => {
                return Err(sqlx::Error::Decode(
                    "a row that is neither a product nor a stored deduction".into(),
                ));
            }
        }
    }
    Ok(read)
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

/// The first outcome of an id, about to be recorded.
#[derive(Debug, Clone)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    /// The canonical items, stored for audits.
    pub items: serde_json::Value,
    pub outcome: &'a StoredDeduction,
}

/// Writes `changes` (every one with the version it was read at) and `deductions` in one
/// statement: all of it, or, when a product moved since it was read, a product of `judged`
/// no longer has the version the batch was judged at, or another writer recorded one of these
/// ids meanwhile, nothing, with a serialization failure (40001) that the caller retries (the
/// next read then replays the id).
pub async fn record(
    conn: &mut PgConnection,
    judged: &[(ProductId, StockRow)],
    changes: &[Change],
    deductions: &[NewDeduction<'_>],
) -> sqlx::Result<()> {
    let judged_ids: Vec<i64> = judged.iter().map(|(id, _)| id.0).collect();
    let judged_versions: Vec<i64> = judged.iter().map(|(_, row)| row.version).collect();
    let ids: Vec<i64> = changes.iter().map(|c| c.product_id.0).collect();
    let deltas: Vec<i64> = changes.iter().map(|c| c.delta).collect();
    let versions: Vec<Option<i64>> = changes.iter().map(|c| c.version).collect();
    let deduction_ids: Vec<&str> = deductions.iter().map(|d| d.deduction_id).collect();
    let fingerprints: Vec<&str> = deductions.iter().map(|d| d.fingerprint).collect();
    let items: Vec<&serde_json::Value> = deductions.iter().map(|d| &d.items).collect();
    let statuses: Vec<&str> = deductions
        .iter()
        .map(|d| d.outcome.status.as_str())
        .collect();
    let reasons: Vec<Option<&str>> = deductions
        .iter()
        .map(|d| d.outcome.rejection_reason.map(RejectionReason::as_str))
        .collect();
    let codes: Vec<i16> = deductions
        .iter()
        .map(|d| d.outcome.response_status)
        .collect();
    let bodies: Vec<&[u8]> = deductions
        .iter()
        .map(|d| d.outcome.response_body.as_slice())
        .collect();
    // Data-modifying CTEs all run to completion before the final SELECT counts what they did
    // (the SELECT sees the statement's snapshot, from before the CTEs' own changes);
    // a count short of what was decided raises, which undoes the whole statement. The rows
    // are locked in ascending product id before the update touches any (`ordered`, whose count
    // the update's condition needs first: the plan cannot reorder it), so two writers never
    // wait on each other in a cycle, whatever plan the update gets; a wait longer than the
    // session's `lock_timeout` fails the statement as contention. An insert of an id another
    // writer is inserting waits for it, and if it commits, skips the row, and the count says so.
    sqlx::query_scalar!(
        r#"WITH ordered AS MATERIALIZED (
               SELECT product_id FROM products WHERE product_id = ANY($1)
                ORDER BY product_id FOR UPDATE
           ), changed AS (
               UPDATE products AS p
                  SET stock = p.stock + c.delta, version = p.version + 1, updated_at = now()
                 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                      AS c (product_id, delta, version)
                WHERE p.product_id = c.product_id
                  AND (c.version IS NULL OR p.version = c.version)
                  AND p.stock + c.delta >= 0
                  AND (SELECT count(*) FROM ordered) > 0
               RETURNING 1
           ), recorded AS (
               INSERT INTO deductions (deduction_id, fingerprint, items, status,
                                       rejection_reason, response_status, response_body)
               SELECT * FROM unnest($4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[],
                                    $9::smallint[], $10::bytea[])
                   ON CONFLICT ON CONSTRAINT deductions_pkey DO NOTHING
               RETURNING 1
           )
           SELECT CASE
               WHEN (SELECT count(*) FROM products AS p
                       JOIN unnest($11::bigint[], $12::bigint[]) AS j (product_id, version)
                         ON p.product_id = j.product_id AND p.version = j.version)
                    <> cardinality($11::bigint[])
                   THEN serialization_failure('a product moved since the batch was judged')
               WHEN (SELECT count(*) FROM changed) <> cardinality($1::bigint[])
                   THEN serialization_failure('a product''s stock moved since it was read')
               WHEN (SELECT count(*) FROM recorded) <> cardinality($4::text[])
                   THEN serialization_failure('a deduction id of this batch was recorded meanwhile')
               ELSE true
           END AS "recorded!""#,
        &ids,
        &deltas,
        &versions as &[Option<i64>],
        &deduction_ids as &[&str],
        &fingerprints as &[&str],
        &items as &[&serde_json::Value],
        &statuses as &[&str],
        &reasons as &[Option<&str>],
        &codes,
        &bodies as &[&[u8]],
        &judged_ids,
        &judged_versions,
    )
    .fetch_one(conn)
    .await
    .map(drop)
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
