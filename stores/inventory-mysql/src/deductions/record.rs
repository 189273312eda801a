//! [`record`]: a batch's stock change, first outcomes and hold ends, all or nothing in the
//! caller's transaction.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::MySqlConnection;

use crate::holds::{self, HoldRow};
use crate::stock::{self, Change, StockRow};
use crate::{Unit, duplicate_is_contention, json_array};

/// The first outcome of a deduction id, about to be recorded.
#[derive(Debug, Clone, Copy)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    /// The canonical items, stored for audits.
    pub items: &'a serde_json::Value,
    /// `APPLIED` or `REJECTED`.
    pub status: &'a str,
    /// Set exactly when `status` is `REJECTED`.
    pub rejection_reason: Option<&'a str>,
    pub response_status: i16,
    pub response_body: &'a [u8],
}

/// A hold's try, about to be recorded: `HELD` until `expires_at` with its units, or, without
/// units, `REFUSED`.
#[derive(Debug, Clone, Copy)]
pub struct NewHold<'a> {
    pub hold_id: &'a str,
    pub fingerprint: &'a str,
    pub items: &'a serde_json::Value,
    /// Set exactly when the try held nothing.
    pub rejection_reason: Option<&'a str>,
    pub response_status: i16,
    pub response_body: &'a [u8],
    /// The units held, when the try held them.
    pub held: Option<&'a [Unit]>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Everything a batch records besides the stock change.
#[derive(Debug, Clone, Default)]
pub struct Outcomes<'a> {
    pub deductions: Vec<NewDeduction<'a>>,
    pub holds: Vec<NewHold<'a>>,
    /// Holds on the batch's products to confirm, if still `HELD` and before their deadline.
    pub confirms: Vec<&'a str>,
    /// Holds on the batch's products to cancel (or expire, past their deadline), if still
    /// `HELD`: their units go back to stock in the batch's own update of the products.
    pub cancels: Vec<&'a str>,
}

impl Outcomes<'_> {
    pub fn is_empty(&self) -> bool {
        self.deductions.is_empty()
            && self.holds.is_empty()
            && self.confirms.is_empty()
            && self.cancels.is_empty()
    }
}

/// What [`record`] wrote besides the outcomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// Every product the batch updated, with the stock and version it left, in ascending id.
    pub written: Vec<(i64, StockRow)>,
    /// The confirms and cancels that changed their hold, as they left it; an end missing here
    /// found its hold no longer `HELD` (or, for a confirm, past its deadline), or locked by
    /// another writer at that moment, and changed nothing.
    pub decided: Vec<HoldRow>,
}

/// Writes `changes` (every one with the version it was read at, or none for a give-back not
/// read), `new.deductions` and `new.holds`: all of it, or, when a product moved since it was
/// read, a product of `judged` no longer has the version the batch was judged at, or another
/// writer recorded one of these ids meanwhile (a tombstone too), a serialization failure
/// (40001), after which the caller rolls its transaction back and judges the batch again (the
/// next read then replays the id). PostgreSQL: `deductions::queries::record`.
///
/// It also ends the holds of `new.confirms` and `new.cancels` that are still `HELD` and not
/// locked by another writer (skipped, never waited for: a sweep or a cancel elsewhere that
/// holds one decides it): their `held_units` go, and a cancel's units are added to its
/// products in the same update as `changes`, which must therefore name every product of the
/// cancelled holds: a cancel of a hold with a unit on any other product changes nothing here
/// (its id was reused since the caller took it; the caller's general way decides it), as in
/// PostgreSQL. An end that changed nothing is no failure; it is absent from
/// [`Recorded::decided`].
///
/// Statements, in PostgreSQL's lock order: the products of `changes` locked in ascending id;
/// the versions of `judged` checked; the holds to end locked (ascending id, `SKIP LOCKED`);
/// their units read; the products updated (guarded, counted); the holds ended and their units
/// deleted; the deductions, the holds and their units inserted. A deduction or hold id
/// already stored fails its plain `INSERT` with a duplicate key (waiting first for a writer
/// that has it uncommitted, as PostgreSQL does), reported as the serialization failure
/// PostgreSQL's count raised.
pub async fn record(
    conn: &mut MySqlConnection,
    judged: &[(i64, StockRow)],
    changes: &[Change],
    new: &Outcomes<'_>,
) -> sqlx::Result<Recorded> {
    // One clock reading for the ends, taken before any lock this function waits for, as
    // PostgreSQL's `now()` is its statement's start: a deadline that passes during those
    // waits does not count. (A batch that read first may have waited for its products in
    // `read`, at most the session's lock wait: a deadline passing then does count.)
    let ending = !new.confirms.is_empty() || !new.cancels.is_empty();
    let clock = if ending {
        Some(holds::clock(conn).await?)
    } else {
        None
    };
    let change_ids: Vec<i64> = changes.iter().map(|c| c.product_id).collect();
    let locked = stock::lock_products(conn, &change_ids).await?;
    stock::check_judged(conn, judged).await?;

    // The ends: decided on the locked rows, by that one reading.
    let mut decided: Vec<HoldRow> = Vec::new();
    let mut given: BTreeMap<i64, i64> = BTreeMap::new();
    let mut at = None;
    if let Some(now) = clock {
        at = Some(now);
        let ending: Vec<&str> = new.confirms.iter().chain(&new.cancels).copied().collect();
        let held = holds::lock_holds(conn, &ending, true, now).await?;
        let endable: Vec<HoldRow> = held
            .into_iter()
            .filter(|row| {
                let deadline_ahead = row.expires_at.is_some_and(|deadline| deadline > now);
                let cancel = new.cancels.contains(&row.hold_id.as_str());
                row.state == "HELD" && (deadline_ahead || cancel)
            })
            .collect();
        let endable_ids: Vec<&str> = endable.iter().map(|h| h.hold_id.as_str()).collect();
        let units = stock::units_of(conn, &endable_ids).await?;
        // A cancel with a unit outside the batch's products is not the batch's to decide:
        // its give-back would miss that product (PostgreSQL's statement skips it alike).
        let elsewhere: Vec<&str> = units
            .iter()
            .filter(|(hold_id, product_id, _)| {
                new.cancels.contains(&hold_id.as_str()) && !change_ids.contains(product_id)
            })
            .map(|(hold_id, _, _)| hold_id.as_str())
            .collect();
        for row in endable {
            if elsewhere.contains(&row.hold_id.as_str()) {
                continue;
            }
            let state = if new.confirms.contains(&row.hold_id.as_str()) {
                "CONFIRMED"
            } else if row.due {
                "EXPIRED"
            } else {
                "CANCELLED"
            };
            decided.push(holds::ended(row, state, now));
        }
        for (hold_id, product_id, quantity) in &units {
            let decided_here = decided.iter().any(|h| &h.hold_id == hold_id);
            if decided_here && new.cancels.contains(&hold_id.as_str()) {
                *given.entry(*product_id).or_default() += quantity;
            }
        }
    }

    let with_given: Vec<(Change, i64)> = changes
        .iter()
        .map(|c| (*c, given.get(&c.product_id).copied().unwrap_or(0)))
        .collect();
    stock::apply_changes(conn, &with_given, at).await?;
    // The rows are locked and every change matched: what each one left follows from the read.
    let mut written: Vec<(i64, StockRow)> = with_given
        .iter()
        .filter_map(|(change, extra)| {
            let read = locked.get(&change.product_id)?;
            let row = StockRow {
                stock: read.stock + change.delta + extra,
                version: read.version + 1,
            };
            Some((change.product_id, row))
        })
        .collect();
    written.sort_by_key(|(id, _)| *id);

    if let Some(now) = at {
        let states: Vec<(&str, &str)> = decided
            .iter()
            .map(|h| (h.hold_id.as_str(), h.state.as_str()))
            .collect();
        holds::set_states(conn, &states, now).await?;
        let ids: Vec<&str> = decided.iter().map(|h| h.hold_id.as_str()).collect();
        stock::delete_units(conn, &ids).await?;
    }

    insert_deductions(conn, &new.deductions).await?;
    insert_holds(conn, &new.holds).await?;
    Ok(Recorded { written, decided })
}

/// Inserts the deductions' first outcomes; a duplicate id fails the whole statement.
async fn insert_deductions(
    conn: &mut MySqlConnection,
    deductions: &[NewDeduction<'_>],
) -> sqlx::Result<()> {
    if deductions.is_empty() {
        return Ok(());
    }
    // The body travels as hex (JSON has no bytes); a missing reason is a missing key, NULL.
    let json = json_array(deductions.iter().map(|d| {
        let mut row = serde_json::json!({
            "id": d.deduction_id,
            "fingerprint": d.fingerprint,
            "items": d.items,
            "status": d.status,
            "code": d.response_status,
            "body": hex(d.response_body),
        });
        if let Some(reason) = d.rejection_reason {
            row["reason"] = reason.into();
        }
        row
    }));
    let inserted = sqlx::query!(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, rejection_reason,
                                 response_status, response_body)
         SELECT d.id, d.fingerprint, d.items, d.status, d.reason, d.code, UNHEX(d.body)
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             id LONGTEXT PATH '$.id',
             fingerprint LONGTEXT PATH '$.fingerprint',
             items JSON PATH '$.items',
             status LONGTEXT PATH '$.status',
             reason LONGTEXT PATH '$.reason',
             code INT PATH '$.code',
             body LONGTEXT PATH '$.body')) AS d
         ORDER BY d.n",
        json,
    )
    .execute(&mut *conn)
    .await;
    duplicate_is_contention(
        inserted,
        "a deduction id of this batch was recorded meanwhile",
    )
    .map(drop)
}

/// Inserts the holds' tries and the units of those that held; a duplicate hold id (a try or
/// a tombstone) fails the whole statement.
async fn insert_holds(conn: &mut MySqlConnection, holds: &[NewHold<'_>]) -> sqlx::Result<()> {
    if holds.is_empty() {
        return Ok(());
    }
    let json = json_array(holds.iter().map(|h| {
        let mut row = serde_json::json!({
            "id": h.hold_id,
            "fingerprint": h.fingerprint,
            "items": h.items,
            "state": if h.held.is_some() { "HELD" } else { "REFUSED" },
            "code": h.response_status,
            "body": hex(h.response_body),
            "created_at": datetime_text(h.created_at),
        });
        if let Some(reason) = h.rejection_reason {
            row["reason"] = reason.into();
        }
        if h.held.is_some() {
            row["expires_at"] = datetime_text(h.expires_at).into();
        }
        row
    }));
    // The dates travel as text in the one form `CAST(… AS DATETIME(6))` reads exactly (UTC,
    // six fractional digits); a missing `expires_at` (a refusal) is NULL.
    let inserted = sqlx::query!(
        "INSERT INTO holds (hold_id, fingerprint, items, state, rejection_reason,
                            response_status, response_body, expires_at, created_at, updated_at)
         SELECT h.id, h.fingerprint, h.items, h.state, h.reason, h.code, UNHEX(h.body),
                CAST(h.expires_at AS DATETIME(6)), CAST(h.created_at AS DATETIME(6)),
                CAST(h.created_at AS DATETIME(6))
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             id LONGTEXT PATH '$.id',
             fingerprint LONGTEXT PATH '$.fingerprint',
             items JSON PATH '$.items',
             state LONGTEXT PATH '$.state',
             reason LONGTEXT PATH '$.reason',
             code INT PATH '$.code',
             body LONGTEXT PATH '$.body',
             expires_at VARCHAR(64) PATH '$.expires_at',
             created_at VARCHAR(64) PATH '$.created_at')) AS h
         ORDER BY h.n",
        json,
    )
    .execute(&mut *conn)
    .await;
    duplicate_is_contention(inserted, "a hold id of this batch was recorded meanwhile")?;

    let units: Vec<serde_json::Value> = holds
        .iter()
        .flat_map(|h| {
            h.held.unwrap_or_default().iter().map(move |unit| {
                serde_json::json!({
                    "hold": h.hold_id,
                    "product": unit.product_id,
                    "quantity": unit.quantity,
                })
            })
        })
        .collect();
    if units.is_empty() {
        return Ok(());
    }
    // PostgreSQL's `ON CONFLICT ON CONSTRAINT held_units_pkey DO NOTHING`: a product named
    // twice in one hold keeps its first row. `quantity = quantity` changes nothing, and,
    // unlike `INSERT IGNORE`, lets every other error (a CHECK refused) fail the statement.
    sqlx::query!(
        "INSERT INTO held_units (hold_id, product_id, quantity)
         SELECT u.hold, u.product, u.quantity
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             hold LONGTEXT PATH '$.hold',
             product BIGINT PATH '$.product',
             quantity BIGINT PATH '$.quantity')) AS u
         ORDER BY u.n
         ON DUPLICATE KEY UPDATE quantity = held_units.quantity",
        json_array(units),
    )
    .execute(&mut *conn)
    .await
    .map(drop)
}

/// `at` as `YYYY-MM-DD hh:mm:ss.ffffff` (UTC, the sessions' time zone), the text a
/// `DATETIME(6)` is cast from; past the microsecond it is cut, as the service cuts its clock.
fn datetime_text(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

/// `bytes` as hex text, for `UNHEX` on the other side.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_as_hex() {
        assert_eq!(hex(&[0, 1, 0xab, 0xff]), "0001abff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn dates_travel_to_the_microsecond() {
        let at = DateTime::parse_from_rfc3339("2024-02-29T23:59:58.123456789Z")
            .expect("date")
            .with_timezone(&Utc);
        assert_eq!(datetime_text(at), "2024-02-29 23:59:58.123456");
    }
}
