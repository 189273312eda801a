//! [`record`]: a batch's stock change, first outcomes and hold ends, in one statement that
//! commits them (on MySQL, the statements of `inventory_mysql::deductions::record`, in the
//! attempt's transaction).

mod mysql;

use chrono::{DateTime, Utc};
use platform::storage::Conn;
use shared::events::{LineItem, RejectionReason};
use shared::ids::ProductId;
use sqlx::types::Json;

use super::{AttemptTx, StoredDeduction};
use crate::holds::queries::HoldRow;
use crate::stock::queries::{Change, StockRow};

/// The first outcome of a deduction id, about to be recorded.
#[derive(Debug, Clone)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    /// The canonical items, stored for audits.
    pub items: serde_json::Value,
    pub outcome: &'a StoredDeduction,
}

/// A hold's try, about to be recorded: `HELD` until `expires_at` with its units, or refused.
#[derive(Debug, Clone)]
pub struct NewHold<'a> {
    pub hold_id: &'a str,
    pub fingerprint: &'a str,
    pub items: serde_json::Value,
    pub outcome: &'a StoredDeduction,
    /// The units held, when the try held them.
    pub held: Option<&'a [LineItem]>,
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

/// What [`record`] wrote besides the outcomes, as the database returned it.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Every product the statement updated, with the stock and version it left.
    pub written: Vec<(ProductId, StockRow)>,
    /// The confirms and cancels that changed their hold, as they left it; an end missing here
    /// found its hold no longer `HELD` (or, for a confirm, past its deadline; for a cancel,
    /// with units outside the batch's products), or locked by another writer at that moment,
    /// and changed nothing.
    pub decided: Vec<HoldRow>,
}

/// Writes `changes` (every one with the version it was read at), `deductions` and `holds` in one
/// statement: all of it, or, when a product moved since it was read, a product of `judged`
/// no longer has the version the batch was judged at, or another writer recorded one of these
/// ids meanwhile (a tombstone too), nothing, with a serialization failure (40001) that the
/// caller retries (the next read then replays the id).
///
/// In the same statement it ends the holds of `confirms` and `cancels` that are still `HELD`
/// and not locked by another writer (skipped, never waited for: a sweep or a cancel elsewhere
/// that holds one decides it): their `held_units` go, and a cancel's units are added to its
/// products in the same update as `changes`, which must therefore name every product of the
/// cancelled holds (the batch's products: a hold joins the batch of exactly its products).
/// A cancel of a hold with a unit on any other product changes nothing here (its id was
/// reused since this process took it): the general way decides it.
/// An end that changed nothing is no failure; it is absent from [`Recorded::decided`].
///
/// On MySQL, the same rows and guards in several statements, in `tx`, which the caller
/// commits, or rolls back after a failure.
pub async fn record(
    tx: &mut AttemptTx<'_>,
    judged: &[(ProductId, StockRow)],
    changes: &[Change],
    new: &Outcomes<'_>,
) -> sqlx::Result<Recorded> {
    let conn = match tx.conn() {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return mysql::record(conn, judged, changes, new).await,
    };
    let judged_ids: Vec<i64> = judged.iter().map(|(id, _)| id.0).collect();
    let judged_versions: Vec<i64> = judged.iter().map(|(_, row)| row.version).collect();
    let ids: Vec<i64> = changes.iter().map(|c| c.product_id.0).collect();
    let deltas: Vec<i64> = changes.iter().map(|c| c.delta).collect();
    let versions: Vec<Option<i64>> = changes.iter().map(|c| c.version).collect();
    let d = Columns::of(
        new.deductions
            .iter()
            .map(|d| (d.deduction_id, d.fingerprint, &d.items, d.outcome)),
    );
    let h = Columns::of(
        new.holds
            .iter()
            .map(|h| (h.hold_id, h.fingerprint, &h.items, h.outcome)),
    );
    let hold_states: Vec<&str> = new
        .holds
        .iter()
        .map(|h| if h.held.is_some() { "HELD" } else { "REFUSED" })
        .collect();
    let expiries: Vec<Option<DateTime<Utc>>> = new
        .holds
        .iter()
        .map(|h| h.held.map(|_| h.expires_at))
        .collect();
    let created: Vec<DateTime<Utc>> = new.holds.iter().map(|h| h.created_at).collect();
    let units: Vec<(&str, &LineItem)> = new
        .holds
        .iter()
        .flat_map(|h| {
            h.held
                .unwrap_or_default()
                .iter()
                .map(move |item| (h.hold_id, item))
        })
        .collect();
    let unit_holds: Vec<&str> = units.iter().map(|(id, _)| *id).collect();
    let unit_products: Vec<i64> = units.iter().map(|(_, item)| item.product_id.0).collect();
    let unit_quantities: Vec<i64> = units.iter().map(|(_, item)| item.quantity).collect();
    // Data-modifying CTEs all run to completion before the final SELECT counts what they did
    // (the SELECT sees the statement's snapshot, from before the CTEs' own changes);
    // a count short of what was decided raises, which undoes the whole statement. The rows
    // are locked in ascending product id before the update touches any (`ordered`, whose count
    // the update's condition needs first: the plan cannot reorder it), so two writers never
    // wait on each other in a cycle, whatever plan the update gets; a wait longer than the
    // session's `lock_timeout` fails the statement as contention. An insert of an id another
    // writer is inserting waits for it, and if it commits, skips the row, and the count says
    // so (a hold's units then skip theirs too, and go with the rollback).
    //
    // The ends lock their holds with SKIP LOCKED: a hold another writer holds (the sweep, a
    // confirm or cancel that came the general way) is left to it, so this statement, which
    // holds the products' rows, never waits for a hold whose writer may be waiting for them.
    // A cancel ends its hold only when every unit of it is on the batch's products (`$1`
    // names them all when the batch cancels): the give-back goes into this update, and a
    // unit of another product would be deleted with nothing given back. The products a
    // process remembered for a hold id can be another hold's: the one it took ended
    // elsewhere, its row was deleted after the retention period, and the id was used again.
    //
    // The statement runs on a session that plans it once for any values (`planned_once`), so
    // every table is reached through its key by a condition on a parameter (`= ANY($n)`, even
    // where a join already implies it), and the holds' state is judged on the locked rows rather
    // than in the index search: a generic plan made on empty tables would otherwise scan
    // `holds_due_idx` or a whole primary key (`e2e/tests/flow/plans.rs`).
    let row = sqlx::query!(
        r#"WITH ordered AS MATERIALIZED (
               SELECT product_id FROM products WHERE product_id = ANY($1)
                ORDER BY product_id FOR UPDATE
           ), ending AS MATERIALIZED (
               SELECT hold_id, state, expires_at FROM holds
                WHERE hold_id = ANY($25::text[] || $26::text[])
                ORDER BY hold_id FOR UPDATE SKIP LOCKED
           ), decided AS (
               UPDATE holds AS h
                  SET state = CASE WHEN h.hold_id = ANY($25) THEN 'CONFIRMED'
                                   WHEN h.expires_at <= now() THEN 'EXPIRED'
                                   ELSE 'CANCELLED' END,
                      updated_at = now()
                WHERE h.hold_id = ANY (ARRAY(
                          SELECT e.hold_id FROM ending AS e
                           WHERE e.state = 'HELD' AND (e.expires_at > now() OR e.hold_id = ANY($26))
                             AND NOT (e.hold_id = ANY($26) AND EXISTS (
                                 SELECT 1 FROM held_units AS u
                                  WHERE u.hold_id = ANY($26) AND u.hold_id = e.hold_id
                                    AND u.product_id <> ALL($1)))))
               RETURNING h.hold_id, h.state, h.items, h.expires_at, h.created_at
           ), freed AS (
               DELETE FROM held_units
                WHERE hold_id = ANY (ARRAY(SELECT hold_id FROM decided))
               RETURNING hold_id, product_id, quantity
           ), changed AS (
               UPDATE products AS p
                  SET stock = p.stock + c.delta + coalesce(
                          (SELECT sum(f.quantity) FROM freed AS f
                            WHERE f.product_id = p.product_id AND f.hold_id = ANY($26)), 0),
                      version = p.version + 1, updated_at = now()
                 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                      AS c (product_id, delta, version)
                WHERE p.product_id = ANY($1) AND p.product_id = c.product_id
                  AND (c.version IS NULL OR p.version = c.version)
                  AND p.stock + c.delta >= 0
                  AND (SELECT count(*) FROM ordered) > 0
               RETURNING p.product_id, p.stock, p.version
           ), recorded AS (
               INSERT INTO deductions (deduction_id, fingerprint, items, status,
                                       rejection_reason, response_status, response_body)
               SELECT * FROM unnest($4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[],
                                    $9::smallint[], $10::bytea[])
                   ON CONFLICT ON CONSTRAINT deductions_pkey DO NOTHING
               RETURNING 1
           ), held AS (
               INSERT INTO holds (hold_id, fingerprint, items, state, rejection_reason,
                                  response_status, response_body, expires_at, created_at,
                                  updated_at)
               SELECT h.*, h.created_at
                 FROM unnest($13::text[], $14::text[], $15::jsonb[], $16::text[], $17::text[],
                             $18::smallint[], $19::bytea[], $20::timestamptz[],
                             $21::timestamptz[])
                      AS h (hold_id, fingerprint, items, state, rejection_reason,
                            response_status, response_body, expires_at, created_at)
                   ON CONFLICT ON CONSTRAINT holds_pkey DO NOTHING
               RETURNING 1
           ), units AS (
               INSERT INTO held_units (hold_id, product_id, quantity)
               SELECT * FROM unnest($22::text[], $23::bigint[], $24::bigint[])
                   ON CONFLICT ON CONSTRAINT held_units_pkey DO NOTHING
           )
           SELECT CASE
               WHEN (SELECT count(*) FROM products AS p
                       JOIN unnest($11::bigint[], $12::bigint[]) AS j (product_id, version)
                         ON p.product_id = j.product_id AND p.version = j.version
                      WHERE p.product_id = ANY($11))
                    <> cardinality($11::bigint[])
                   THEN serialization_failure('a product moved since the batch was judged')
               WHEN (SELECT count(*) FROM changed) <> cardinality($1::bigint[])
                   THEN serialization_failure('a product''s stock moved since it was read')
               WHEN (SELECT count(*) FROM recorded) <> cardinality($4::text[])
                   THEN serialization_failure('a deduction id of this batch was recorded meanwhile')
               WHEN (SELECT count(*) FROM held) <> cardinality($13::text[])
                   THEN serialization_failure('a hold id of this batch was recorded meanwhile')
               ELSE true
           END AS "recorded!",
           (SELECT json_agg(json_build_array(product_id, stock, version)) FROM changed)
               AS "written: Json<Vec<(i64, i64, i64)>>",
           (SELECT json_agg(d) FROM decided AS d) AS "decided: Json<Vec<Decided>>",
           now() AS "at!""#,
        &ids,
        &deltas,
        &versions as &[Option<i64>],
        &d.ids as &[&str],
        &d.fingerprints as &[&str],
        &d.items as &[&serde_json::Value],
        &d.statuses as &[&str],
        &d.reasons as &[Option<&str>],
        &d.codes,
        &d.bodies as &[&[u8]],
        &judged_ids,
        &judged_versions,
        &h.ids as &[&str],
        &h.fingerprints as &[&str],
        &h.items as &[&serde_json::Value],
        &hold_states as &[&str],
        &h.reasons as &[Option<&str>],
        &h.codes,
        &h.bodies as &[&[u8]],
        &expiries as &[Option<DateTime<Utc>>],
        &created,
        &unit_holds as &[&str],
        &unit_products,
        &unit_quantities,
        &new.confirms as &[&str],
        &new.cancels as &[&str],
    )
    .fetch_one(conn)
    .await?;
    let written = row
        .written
        .map(|Json(rows)| rows)
        .unwrap_or_default()
        .into_iter()
        .map(|(id, stock, version)| (ProductId(id), StockRow { stock, version }))
        .collect();
    let at = row.at;
    let decided = row
        .decided
        .map(|Json(rows)| rows)
        .unwrap_or_default()
        .into_iter()
        .map(|d| HoldRow {
            due: d.expires_at <= at,
            hold_id: d.hold_id,
            state: d.state,
            items: d.items,
            expires_at: Some(d.expires_at),
            created_at: d.created_at,
            updated_at: at,
            changed: true,
        })
        .collect();
    Ok(Recorded { written, decided })
}

/// A hold an end changed, as the statement returns it: one JSON object per hold, since a
/// column per field would cost the planner a subquery each, on every batch.
#[derive(Debug, serde::Deserialize)]
struct Decided {
    hold_id: String,
    state: String,
    items: serde_json::Value,
    expires_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
}

/// The columns every recorded first outcome has, deduction or hold.
struct Columns<'a> {
    ids: Vec<&'a str>,
    fingerprints: Vec<&'a str>,
    items: Vec<&'a serde_json::Value>,
    statuses: Vec<&'static str>,
    reasons: Vec<Option<&'static str>>,
    codes: Vec<i16>,
    bodies: Vec<&'a [u8]>,
}

impl<'a> Columns<'a> {
    fn of(
        rows: impl Iterator<Item = (&'a str, &'a str, &'a serde_json::Value, &'a StoredDeduction)>,
    ) -> Self {
        let mut columns = Self {
            ids: Vec::new(),
            fingerprints: Vec::new(),
            items: Vec::new(),
            statuses: Vec::new(),
            reasons: Vec::new(),
            codes: Vec::new(),
            bodies: Vec::new(),
        };
        for (id, fingerprint, items, outcome) in rows {
            columns.ids.push(id);
            columns.fingerprints.push(fingerprint);
            columns.items.push(items);
            columns.statuses.push(outcome.status.as_str());
            columns
                .reasons
                .push(outcome.rejection_reason.map(RejectionReason::as_str));
            columns.codes.push(outcome.response_status);
            columns.bodies.push(outcome.response_body.as_slice());
        }
        columns
    }
}
