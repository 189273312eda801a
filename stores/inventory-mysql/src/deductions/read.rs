//! [`read`]: what a batch is judged against, in one round trip.

use sqlx::MySqlConnection;

use crate::stock::StockRow;
use crate::{ascending, json_array, json_texts};

/// Which table a stored id was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    /// `deductions`: a direct deduction's id.
    Deduction,
    /// `holds`: a hold's id (a try's outcome, or a tombstone).
    Hold,
}

/// A stored deduction or hold, as its row keeps it: a first outcome (every column set, the
/// reason only on a refusal), or, for a hold, a tombstone (no fingerprint, code or body). The service reads status and reason strictly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    pub kind: IdKind,
    pub id: String,
    pub fingerprint: Option<String>,
    /// `APPLIED` or `REJECTED`; a hold's try that held something is `APPLIED` whatever became
    /// of the hold since (its first outcome is what a repeat answers), a refused one
    /// `REJECTED` (a tombstone reads `APPLIED` too: it is told by its missing body).
    pub status: Option<String>,
    pub rejection_reason: Option<String>,
    pub response_status: Option<i16>,
    pub response_body: Option<Vec<u8>>,
}

/// What a batch reads before it is judged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Read {
    /// The products of the batch that exist, with the version they were read at, in
    /// ascending id.
    pub stock: Vec<(i64, StockRow)>,
    /// The ids of the batch stored before it.
    pub stored: Vec<StoredRow>,
}

/// The stock of `products` and the stored outcomes of `deductions` and `holds`, in one
/// statement. The products are locked (`FOR UPDATE`, in ascending id, waiting for each up to
/// the session's lock wait): inside the transaction that then runs [`super::record`], the stock
/// a batch is judged on cannot move before its write. PostgreSQL reads a snapshot instead,
/// since its write is one statement that checks the versions read
/// (`deductions::queries::read`); here the write is several statements, and a product another
/// writer moves every few milliseconds would fail that check again and again.
pub async fn read(
    conn: &mut MySqlConnection,
    products: &[i64],
    deductions: &[&str],
    holds: &[&str],
) -> sqlx::Result<Read> {
    let products = json_array(ascending(products).into_iter().map(serde_json::Value::from));
    // Three kinds of row in one statement, each table read by key from its ids (STRAIGHT_JOIN),
    // each id once. The text ids are `TEXT` in `JSON_TABLE`: a longer id is never cut to match
    // a shorter one. Only the products are locked (the parenthesised first part): a stored id
    // is a replay, and locking its row would only delay the sweep or end that wants it.
    let rows = sqlx::query!(
        "(SELECT 'product' AS `kind!: String`, p.product_id AS `product_id?: i64`,
                p.stock AS `stock?: i64`, p.version AS `version?: i64`,
                NULL AS `request_id?: String`, NULL AS `fingerprint?: String`,
                NULL AS `status?: String`, NULL AS `rejection_reason?: String`,
                NULL AS `response_status?: i16`, NULL AS `response_body?: Vec<u8>`
           FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS jp
           STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = jp.id
           FOR UPDATE)
         UNION ALL
         SELECT 'deduction', NULL, NULL, NULL, d.deduction_id, d.fingerprint, d.status,
                d.rejection_reason, d.response_status, d.response_body
           FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS jd
           STRAIGHT_JOIN deductions AS d FORCE INDEX (PRIMARY) ON d.deduction_id = jd.id
         UNION ALL
         SELECT 'hold', NULL, NULL, NULL, h.hold_id, h.fingerprint,
                CASE h.state WHEN 'REFUSED' THEN 'REJECTED' ELSE 'APPLIED' END,
                h.rejection_reason, h.response_status, h.response_body
           FROM JSON_TABLE(?, '$[*]' COLUMNS (id TEXT PATH '$')) AS jh
           STRAIGHT_JOIN holds AS h FORCE INDEX (PRIMARY) ON h.hold_id = jh.id",
        products,
        json_texts(&ascending(deductions)),
        json_texts(&ascending(holds)),
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut read = Read::default();
    for row in rows {
        let kind = match row.kind.as_str() {
            "product" => {
                let (Some(id), Some(stock), Some(version)) =
                    (row.product_id, row.stock, row.version)
                else {
                    return Err(decode("a product row without its stock"));
                };
                read.stock.push((id, StockRow { stock, version }));
                continue;
            }
            "deduction" => IdKind::Deduction,
            "hold" => IdKind::Hold,
            other => return Err(decode(&format!("a row of unknown kind {other:?}"))),
        };
        read.stored.push(StoredRow {
            kind,
            id: row
                .request_id
                .ok_or_else(|| decode("a stored row without its id"))?,
            fingerprint: row.fingerprint,
            status: row.status,
            rejection_reason: row.rejection_reason,
            response_status: row.response_status,
            response_body: row.response_body,
        });
    }
    Ok(read)
}

fn decode(message: &str) -> sqlx::Error {
    sqlx::Error::Decode(message.to_owned().into())
}
