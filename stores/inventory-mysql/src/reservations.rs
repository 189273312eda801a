//! `reservations`: what inventory did with each order's stock, and the two steps a batch of
//! order events costs: [`read_batch`] and [`write_batch`]. The MySQL forms of
//! `inventory_service::reservations::queries`.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use platform_mysql::json_ids;
use platform_mysql::outbox;
/// An outbox row a batch writes: platform's, written by `platform_mysql::outbox::insert`.
pub use platform_mysql::outbox::NewRow;
use sqlx::MySqlConnection;
use uuid::Uuid;

use crate::stock::{self, Change, StockRow};
use crate::{ascending, duplicate_is_contention, json_array, serialization_failure};

/// The primary key on the order id: one reservation (or tombstone) per order. A duplicate
/// names it `PRIMARY` on MySQL; this is PostgreSQL's name for it.
pub const KEY: &str = "reservations_pkey";

/// A reservation as its row keeps it; the service reads state, items and reason strictly.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationRow {
    pub order_id: Uuid,
    /// `APPLIED`, `REJECTED`, `RELEASED` or `CANCELLED`.
    pub state: String,
    /// The line items, `[{"product_id": …, "quantity": …}]`.
    pub items: serde_json::Value,
    pub rejection_reason: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// What a batch of order events reads before it judges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchRead {
    /// The batch's message ids recorded before.
    pub seen: Vec<Uuid>,
    /// The reservations (or tombstones) of its orders that exist.
    pub reservations: Vec<ReservationRow>,
    /// The products it may change that no other transaction held, with their stock and
    /// version, in ascending id.
    pub stock: Vec<(i64, StockRow)>,
    /// Products that exist but another transaction held: the work that needs one of them
    /// waits for a later batch.
    pub busy: Vec<i64>,
}

/// Reads the message ids of `message_ids` recorded before, the reservations of `order_ids`,
/// and the stock of every product the batch may change: those of `products` (its creations'
/// items) and those the `APPLIED` reservations of `cancelled` hold. The products are locked
/// `FOR UPDATE SKIP LOCKED`, in ascending id, only to learn which one another transaction
/// holds: the work needing it waits for a later batch, the rest never waits on it.
/// PostgreSQL: `reservations::queries::read_batch`.
///
/// Meant for a connection outside a transaction (autocommit), as PostgreSQL's one statement:
/// each statement is then its own transaction and the locks end with it; the batch's write
/// checks the versions read. Inside a transaction the locks last until it ends.
pub async fn read_batch(
    conn: &mut MySqlConnection,
    message_ids: &[Uuid],
    order_ids: &[Uuid],
    products: &[i64],
    cancelled: &[Uuid],
) -> sqlx::Result<BatchRead> {
    let mut read = BatchRead::default();
    if !message_ids.is_empty() {
        read.seen = sqlx::query_scalar!(
            "SELECT m.message_id AS `message_id: Uuid`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS j
             STRAIGHT_JOIN processed_messages AS m FORCE INDEX (PRIMARY)
                 ON m.message_id = UNHEX(REPLACE(j.id, '-', ''))",
            json_ids(&ascending(message_ids)),
        )
        .fetch_all(&mut *conn)
        .await?;
    }
    if !order_ids.is_empty() {
        read.reservations = sqlx::query_as!(
            ReservationRow,
            "SELECT r.order_id AS `order_id: Uuid`, r.state,
                    r.items AS `items: serde_json::Value`, r.rejection_reason,
                    r.updated_at AS `updated_at: DateTime<Utc>`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS j
             STRAIGHT_JOIN reservations AS r FORCE INDEX (PRIMARY) ON r.order_id = UNHEX(REPLACE(j.id, '-', ''))",
            json_ids(&ascending(order_ids)),
        )
        .fetch_all(&mut *conn)
        .await?;
    }
    // The products of the cancelled orders' reservations that still hold stock, as
    // PostgreSQL's `wanted`: taken from the rows just read (an item without a product id is
    // no product).
    let mut wanted: BTreeSet<i64> = products.iter().copied().collect();
    for reservation in &read.reservations {
        if reservation.state != "APPLIED" || !cancelled.contains(&reservation.order_id) {
            continue;
        }
        let items = reservation
            .items
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        wanted.extend(
            items
                .iter()
                .filter_map(|item| item.get("product_id").and_then(serde_json::Value::as_i64)),
        );
    }
    if wanted.is_empty() {
        return Ok(read);
    }
    let wanted = json_array(wanted.into_iter().map(serde_json::Value::from));
    // The products free, each locked by key in ascending id and skipped if another
    // transaction holds it; then the products that exist, whichever holds them.
    let free = sqlx::query!(
        "SELECT p.product_id, p.stock, p.version
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = j.id
         FOR UPDATE SKIP LOCKED",
        wanted,
    )
    .fetch_all(&mut *conn)
    .await?;
    let existing = sqlx::query_scalar!(
        "SELECT p.product_id
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
         STRAIGHT_JOIN products AS p FORCE INDEX (PRIMARY) ON p.product_id = j.id",
        wanted,
    )
    .fetch_all(&mut *conn)
    .await?;
    read.stock = free
        .into_iter()
        .map(|row| {
            let stock = StockRow {
                stock: row.stock,
                version: row.version,
            };
            (row.product_id, stock)
        })
        .collect();
    read.busy = existing
        .into_iter()
        .filter(|id| read.stock.iter().all(|(free, _)| free != id))
        .collect();
    Ok(read)
}

/// A reservation about to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewReservation {
    pub order_id: Uuid,
    pub state: String,
    /// The line items, as the service writes them.
    pub items: serde_json::Value,
    pub rejection_reason: Option<String>,
}

/// Everything a judged batch of order events writes.
#[derive(Debug, Default)]
pub struct BatchWrite<'a> {
    /// Every product the batch judged, with the version it was read at.
    pub judged: Vec<(i64, StockRow)>,
    pub changes: Vec<Change>,
    pub inserted: Vec<NewReservation>,
    /// Orders whose reservation goes from `APPLIED` to `RELEASED`.
    pub released: Vec<Uuid>,
    /// The messages applied: (id, kind).
    pub recorded: Vec<(Uuid, &'a str)>,
    pub outbox: Vec<NewRow<'a>>,
}

/// Writes a judged batch: the stock changes, the new reservations, the releases, the message
/// ids and the outbox rows. All of it, or, when what the judgement relied on moved since the
/// read (a product's version, a reservation another batch wrote or released, a message id
/// another consumer recorded), a serialization failure (40001) after which the caller rolls
/// its transaction back and judges the batch again on what it then reads. PostgreSQL:
/// `reservations::queries::write_batch`.
///
/// Statements, in PostgreSQL's lock order: the versions of `judged` checked; the products
/// updated in ascending id (guarded, counted); the reservations inserted in ascending order id
/// (a duplicate fails the plain `INSERT`); the releases in ascending order id (counted: each
/// changes its state); the message ids inserted in ascending id (a duplicate fails); the
/// outbox rows, in the order given.
pub async fn write_batch(conn: &mut MySqlConnection, write: &BatchWrite<'_>) -> sqlx::Result<()> {
    stock::check_judged(conn, &write.judged).await?;
    let changes: Vec<(Change, i64)> = write.changes.iter().map(|c| (*c, 0)).collect();
    stock::apply_changes(conn, &changes, None).await?;

    if !write.inserted.is_empty() {
        let mut inserted: Vec<&NewReservation> = write.inserted.iter().collect();
        inserted.sort_by_key(|r| r.order_id);
        let json = json_array(inserted.iter().map(|r| {
            let mut row = serde_json::json!({
                "order_id": r.order_id.to_string(),
                "state": r.state,
                "items": r.items,
            });
            if let Some(reason) = &r.rejection_reason {
                row["reason"] = reason.as_str().into();
            }
            row
        }));
        let done = sqlx::query!(
            "INSERT INTO reservations (order_id, state, items, rejection_reason)
             SELECT UNHEX(REPLACE(r.order_id, '-', '')), r.state, r.items, r.reason
             FROM JSON_TABLE(?, '$[*]' COLUMNS (
                 n FOR ORDINALITY,
                 order_id CHAR(36) PATH '$.order_id',
                 state LONGTEXT PATH '$.state',
                 items JSON PATH '$.items',
                 reason LONGTEXT PATH '$.reason')) AS r
             ORDER BY r.n",
            json,
        )
        .execute(&mut *conn)
        .await;
        duplicate_is_contention(
            done,
            "another batch wrote a reservation of this order meanwhile",
        )?;
    }

    if !write.released.is_empty() {
        // Every row matched changes its state, so the count matched is the count released; an
        // order given twice is released once, and counted short, as in PostgreSQL.
        let done = sqlx::query!(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS s
             STRAIGHT_JOIN reservations AS r FORCE INDEX (PRIMARY) ON r.order_id = UNHEX(REPLACE(s.id, '-', ''))
             SET r.state = 'RELEASED', r.updated_at = UTC_TIMESTAMP(6)
             WHERE r.state = 'APPLIED'",
            json_ids(&sorted(&write.released)),
        )
        .execute(&mut *conn)
        .await?;
        if usize::try_from(done.rows_affected()).ok() != Some(write.released.len()) {
            return Err(serialization_failure(
                "another batch released this order's stock meanwhile",
            ));
        }
    }

    if !write.recorded.is_empty() {
        let mut recorded = write.recorded.clone();
        recorded.sort_by_key(|(id, _)| *id);
        let json = json_array(
            recorded
                .iter()
                .map(|(id, kind)| serde_json::json!({ "id": id.to_string(), "kind": kind })),
        );
        let done = sqlx::query!(
            "INSERT INTO processed_messages (message_id, kind)
             SELECT UNHEX(REPLACE(m.id, '-', '')), m.kind
             FROM JSON_TABLE(?, '$[*]' COLUMNS (
                 n FOR ORDINALITY,
                 id CHAR(36) PATH '$.id',
                 kind LONGTEXT PATH '$.kind')) AS m
             ORDER BY m.n",
            json,
        )
        .execute(&mut *conn)
        .await;
        duplicate_is_contention(done, "a message was recorded by another consumer")?;
    }

    outbox::insert(conn, &write.outbox).await
}

/// `ids` in ascending order, every one kept (a repeat is counted, as PostgreSQL counts it).
fn sorted(ids: &[Uuid]) -> Vec<Uuid> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

/// The reservation of `order_id`, if inventory heard of the order. PostgreSQL:
/// `reservations::queries::find`.
pub async fn find(
    conn: &mut MySqlConnection,
    order_id: Uuid,
) -> sqlx::Result<Option<ReservationRow>> {
    sqlx::query_as!(
        ReservationRow,
        "SELECT order_id AS `order_id: Uuid`, state, items AS `items: serde_json::Value`,
                rejection_reason, updated_at AS `updated_at: DateTime<Utc>`
         FROM reservations WHERE order_id = ?",
        order_id,
    )
    .fetch_optional(conn)
    .await
}
