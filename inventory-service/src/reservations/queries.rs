//! `reservations`: what inventory did with each order's stock. Every statement is checked
//! against the migrations at build time (`sqlx::query!`, offline data in `.sqlx/`).

use chrono::{DateTime, Utc};
use shared::events::{LineItem, RejectionReason};
use shared::ids::OrderId;
pub use shared::reservation::ReservationState;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

#[derive(Debug, Clone)]
pub struct Reservation {
    pub order_id: OrderId,
    pub state: ReservationState,
    pub items: Vec<LineItem>,
    pub rejection_reason: Option<RejectionReason>,
    pub updated_at: DateTime<Utc>,
}

/// A reservation as the statements return it: state and reason are CHECK-ed text, read
/// strictly into a [`Reservation`] (an unknown value fails the read, never becomes a default).
struct StoredReservation {
    order_id: Uuid,
    state: String,
    items: Json<Vec<LineItem>>,
    rejection_reason: Option<String>,
    updated_at: DateTime<Utc>,
}

fn decode_error(what: &str, raw: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("unknown {what} {raw:?}").into())
}

impl TryFrom<StoredReservation> for Reservation {
    type Error = sqlx::Error;

    fn try_from(row: StoredReservation) -> Result<Self, sqlx::Error> {
        Ok(Self {
            order_id: OrderId(row.order_id),
            state: ReservationState::parse(&row.state)
                .ok_or_else(|| decode_error("reservation state", &row.state))?,
            items: row.items.0,
            rejection_reason: row
                .rejection_reason
                .map(|raw| {
                    RejectionReason::parse(&raw)
                        .ok_or_else(|| decode_error("rejection reason", &raw))
                })
                .transpose()?,
            updated_at: row.updated_at,
        })
    }
}

/// The primary key on the order id: one reservation (or tombstone) per order.
pub const KEY: &str = "reservations_pkey";

/// The reservations (or tombstones) of `order_ids` that exist.
pub async fn find_all(
    conn: &mut PgConnection,
    order_ids: &[Uuid],
) -> sqlx::Result<Vec<Reservation>> {
    let rows = sqlx::query_as!(
        StoredReservation,
        r#"SELECT order_id, state, items AS "items: Json<Vec<LineItem>>", rejection_reason,
                  updated_at
           FROM reservations WHERE order_id = ANY($1)"#,
        order_ids,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(Reservation::try_from).collect()
}

/// A reservation about to be written.
#[derive(Debug, Clone)]
pub struct NewReservation {
    pub order_id: OrderId,
    pub state: ReservationState,
    pub items: Vec<LineItem>,
    pub rejection_reason: Option<RejectionReason>,
}

/// Writes every reservation in one statement, in ascending order id (two batches inserting
/// the same orders wait on each other in one order, never in a cycle); how many were written.
/// An order another transaction wrote meanwhile waits for it, then is skipped.
pub async fn insert_all(conn: &mut PgConnection, rows: &[NewReservation]) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = rows.iter().map(|r| r.order_id.0).collect();
    let states: Vec<&str> = rows.iter().map(|r| r.state.as_str()).collect();
    let items: Vec<Json<&[LineItem]>> = rows.iter().map(|r| Json(r.items.as_slice())).collect();
    let reasons: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.rejection_reason.map(RejectionReason::as_str))
        .collect();
    let done = sqlx::query!(
        "INSERT INTO reservations (order_id, state, items, rejection_reason)
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::text[])
                AS r (order_id, state, items, rejection_reason)
          ORDER BY order_id
         ON CONFLICT ON CONSTRAINT reservations_pkey DO NOTHING",
        &ids,
        &states as &[&str],
        &items as &[Json<&[LineItem]>],
        &reasons as &[Option<&str>],
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Moves every order of `order_ids` from `APPLIED` to `RELEASED` in one statement, taking
/// their rows in ascending order id; how many moved. One that another transaction released
/// meanwhile waits for it, then is not counted.
pub async fn release_all(conn: &mut PgConnection, order_ids: &[Uuid]) -> sqlx::Result<u64> {
    if order_ids.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query!(
        "WITH ordered AS MATERIALIZED (
             SELECT order_id FROM reservations WHERE order_id = ANY($1)
              ORDER BY order_id FOR UPDATE)
         UPDATE reservations SET state = $3, updated_at = now()
          WHERE order_id = ANY($1) AND state = $2
            AND (SELECT count(*) FROM ordered) > 0",
        order_ids,
        ReservationState::Applied.as_str(),
        ReservationState::Released.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

pub async fn find(conn: &mut PgConnection, order_id: OrderId) -> sqlx::Result<Option<Reservation>> {
    let row = sqlx::query_as!(
        StoredReservation,
        r#"SELECT order_id, state, items AS "items: Json<Vec<LineItem>>", rejection_reason,
                  updated_at
           FROM reservations WHERE order_id = $1"#,
        order_id.0,
    )
    .fetch_optional(conn)
    .await?;
    row.map(Reservation::try_from).transpose()
}
