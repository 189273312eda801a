//! `reservations`: what inventory did with each order's stock. Every statement is checked
//! against the migrations at build time (`sqlx::query!`, offline data in `.sqlx/`); on MySQL,
//! the statements of `inventory_mysql::reservations`, called through its `mysql` module (each
//! function holds PostgreSQL's statement and one `match` on the connection at its top).

mod mysql;

use chrono::{DateTime, Utc};
use platform::messaging::outbox::{NewOutboxRow, OutboxColumns};
use platform::storage::Conn;
use shared::events::{LineItem, RejectionReason};
use shared::ids::{OrderId, ProductId};
pub use shared::reservation::ReservationState;
use sqlx::types::Json;
use uuid::Uuid;

use crate::stock::queries::{Change, StockRead, StockRow};

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

/// The primary key on the order id: one reservation (or tombstone) per order. A duplicate of
/// it names `PRIMARY` on MySQL (`inventory_mysql::reservations::KEY` is this same name).
pub const KEY: &str = "reservations_pkey";

/// What a batch of order events reads before it judges, in one statement that locks nothing
/// past its own end.
#[derive(Debug, Default)]
pub struct BatchRead {
    /// The batch's message ids recorded before.
    pub seen: Vec<Uuid>,
    /// The reservations (or tombstones) of its orders that exist.
    pub reservations: Vec<Reservation>,
    /// The products it may change, with their stock and version, and the ones another
    /// transaction holds right now.
    pub stock: StockRead,
}

/// Reads, in one autocommit statement, the message ids of `message_ids` recorded before, the
/// reservations of `order_ids`, and the stock of every product the batch may change: those of
/// `products` (its creations' items) and those the reservations of `cancelled` still hold.
/// The products are taken `FOR UPDATE SKIP LOCKED`, in ascending id, only to learn which one
/// another transaction holds (a holder stuck in the database): the work needing it waits for a
/// later batch, the rest never waits on it. The locks end with the statement; the batch's
/// write checks the versions read.
pub async fn read_batch(
    conn: Conn<'_>,
    message_ids: &[Uuid],
    order_ids: &[Uuid],
    products: &[ProductId],
    cancelled: &[Uuid],
) -> sqlx::Result<BatchRead> {
    let products: Vec<i64> = products.iter().map(|p| p.0).collect();
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            return mysql::read_batch(conn, message_ids, order_ids, &products, cancelled).await;
        }
    };
    // The statement runs on a session that plans it once for any values (`planned_once`), so
    // the products are found by `= ANY` over one array: `IN (SELECT …)` gave a generic plan
    // that read the whole index (e2e/tests/flow/plans.rs checks it).
    let rows = sqlx::query!(
        r#"WITH found AS MATERIALIZED (
               SELECT order_id, state, items, rejection_reason, updated_at
                 FROM reservations WHERE order_id = ANY($2)
           ), wanted AS MATERIALIZED (
               SELECT ARRAY(
                   SELECT unnest($3::bigint[])
                   UNION
                   SELECT (item ->> 'product_id')::bigint
                     FROM found CROSS JOIN jsonb_array_elements(found.items) AS item
                    WHERE found.state = $5 AND found.order_id = ANY($4)
               ) AS ids
           ), locked AS MATERIALIZED (
               SELECT product_id, stock, version FROM products
                WHERE product_id = ANY((SELECT ids FROM wanted)::bigint[])
                ORDER BY product_id FOR UPDATE SKIP LOCKED
           )
           SELECT 'seen' AS "kind!", message_id AS "id?", NULL::text AS "state?",
                  NULL::jsonb AS "items?: Json<Vec<LineItem>>", NULL::text AS "reason?",
                  NULL::timestamptz AS "updated_at?", NULL::bigint AS "product_id?",
                  NULL::bigint AS "stock?", NULL::bigint AS "version?"
             FROM processed_messages WHERE message_id = ANY($1)
           UNION ALL
           SELECT 'reservation', order_id, state, items, rejection_reason, updated_at,
                  NULL, NULL, NULL
             FROM found
           UNION ALL
           SELECT 'product', NULL, NULL, NULL, NULL, NULL, p.product_id, l.stock, l.version
             FROM products AS p LEFT JOIN locked AS l USING (product_id)
            WHERE p.product_id = ANY((SELECT ids FROM wanted)::bigint[])"#,
        message_ids,
        order_ids,
        &products,
        cancelled,
        ReservationState::Applied.as_str(),
    )
    .fetch_all(conn)
    .await?;
    let mut read = BatchRead::default();
    for row in rows {
        match (row.kind.as_str(), row.id, row.product_id) {
            ("seen", Some(id), _) => read.seen.push(id),
            ("reservation", Some(order_id), _) => {
                let stored = StoredReservation {
                    order_id,
                    state: row.state.unwrap_or_default(),
                    items: row.items.unwrap_or_default(),
                    rejection_reason: row.reason,
                    updated_at: row.updated_at.unwrap_or_default(),
                };
                read.reservations.push(Reservation::try_from(stored)?);
            }
            ("product", _, Some(product_id)) => {
                let id = ProductId(product_id);
                match (row.stock, row.version) {
                    (Some(stock), Some(version)) => {
                        read.stock.rows.push((id, StockRow { stock, version }));
                    }
                    _ => {
                        read.stock.busy.insert(id);
                    }
                }
            }
            (kind, ..) => return Err(decode_error("row kind", kind)),
        }
    }
    Ok(read)
}

/// A reservation about to be written.
#[derive(Debug, Clone)]
pub struct NewReservation {
    pub order_id: OrderId,
    pub state: ReservationState,
    pub items: Vec<LineItem>,
    pub rejection_reason: Option<RejectionReason>,
}

/// Everything a judged batch of order events writes.
#[derive(Debug, Default)]
pub struct BatchWrite<'a> {
    /// Every product the batch judged, with the version it was read at.
    pub judged: Vec<(ProductId, StockRow)>,
    pub changes: Vec<Change>,
    pub inserted: Vec<NewReservation>,
    /// Orders whose reservation goes from `APPLIED` to `RELEASED`.
    pub released: Vec<Uuid>,
    /// The messages applied: (id, routing key).
    pub recorded: Vec<(Uuid, &'static str)>,
    pub outbox: &'a [NewOutboxRow],
}

/// Writes a judged batch in one statement that commits on its own: the stock changes, the new
/// reservations, the releases, the message ids and the outbox rows. All of it, or, when what
/// the judgement relied on moved since the read (a product's version, a reservation another
/// batch wrote or released, a message id another consumer recorded), nothing, with a
/// serialization failure (40001): the batch is judged again on what it then reads. Rows are
/// locked in ascending id (products, then reservations) before anything changes, so two
/// writers never wait on each other in a cycle; a wait longer than the session's
/// `lock_timeout` fails the statement as contention.
pub async fn write_batch(conn: Conn<'_>, write: &BatchWrite<'_>) -> sqlx::Result<()> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return mysql::write_batch(conn, write).await,
    };
    let judged_ids: Vec<i64> = write.judged.iter().map(|(id, _)| id.0).collect();
    let judged_versions: Vec<i64> = write.judged.iter().map(|(_, row)| row.version).collect();
    let change_ids: Vec<i64> = write.changes.iter().map(|c| c.product_id.0).collect();
    let deltas: Vec<i64> = write.changes.iter().map(|c| c.delta).collect();
    let versions: Vec<Option<i64>> = write.changes.iter().map(|c| c.version).collect();
    let order_ids: Vec<Uuid> = write.inserted.iter().map(|r| r.order_id.0).collect();
    let states: Vec<&str> = write.inserted.iter().map(|r| r.state.as_str()).collect();
    let items: Vec<Json<&[LineItem]>> = write
        .inserted
        .iter()
        .map(|r| Json(r.items.as_slice()))
        .collect();
    let reasons: Vec<Option<&str>> = write
        .inserted
        .iter()
        .map(|r| r.rejection_reason.map(RejectionReason::as_str))
        .collect();
    let (message_ids, kinds): (Vec<Uuid>, Vec<&str>) = write.recorded.iter().copied().unzip();
    let outbox = OutboxColumns::of(write.outbox);
    // Planned once too, like the read: each join to an `unnest` also carries the key's
    // `= ANY`, so the generic plan reaches `products` by key.
    sqlx::query_scalar!(
        r#"WITH ordered AS MATERIALIZED (
               SELECT product_id FROM products WHERE product_id = ANY($1)
                ORDER BY product_id FOR UPDATE
           ), changed AS (
               UPDATE products AS p
                  SET stock = p.stock + c.delta, version = p.version + 1, updated_at = now()
                 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])
                      AS c (product_id, delta, version)
                WHERE p.product_id = ANY($1) AND p.product_id = c.product_id
                  AND (c.version IS NULL OR p.version = c.version)
                  AND p.stock + c.delta >= 0
                  AND (SELECT count(*) FROM ordered) > 0
               RETURNING 1
           ), inserted AS (
               INSERT INTO reservations (order_id, state, items, rejection_reason)
               SELECT * FROM unnest($6::uuid[], $7::text[], $8::jsonb[], $9::text[])
                      AS r (order_id, state, items, rejection_reason)
                ORDER BY order_id
                   ON CONFLICT ON CONSTRAINT reservations_pkey DO NOTHING
               RETURNING 1
           ), releasing AS MATERIALIZED (
               SELECT order_id FROM reservations WHERE order_id = ANY($10)
                ORDER BY order_id FOR UPDATE
           ), released AS (
               UPDATE reservations SET state = $12, updated_at = now()
                WHERE order_id = ANY($10) AND state = $11
                  AND (SELECT count(*) FROM releasing) > 0
               RETURNING 1
           ), recorded AS (
               INSERT INTO processed_messages (message_id, kind)
               SELECT * FROM unnest($13::uuid[], $14::text[]) AS m (message_id, kind)
                ORDER BY message_id
                   ON CONFLICT DO NOTHING
               RETURNING 1
           ), queued AS (
               INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
               SELECT * FROM unnest($15::uuid[], $16::text[], $17::text[], $18::jsonb[],
                                    $19::jsonb[])
           )
           SELECT CASE
               WHEN (SELECT count(*) FROM products AS p
                       JOIN unnest($4::bigint[], $5::bigint[]) AS j (product_id, version)
                         ON p.product_id = j.product_id AND p.version = j.version
                      WHERE p.product_id = ANY($4))
                    <> cardinality($4::bigint[])
                   THEN serialization_failure('a product moved since the batch was judged')
               WHEN (SELECT count(*) FROM changed) <> cardinality($1::bigint[])
                   THEN serialization_failure('a product''s stock moved since it was read')
               WHEN (SELECT count(*) FROM inserted) <> cardinality($6::uuid[])
                   THEN serialization_failure('another batch wrote a reservation of this order meanwhile')
               WHEN (SELECT count(*) FROM released) <> cardinality($10::uuid[])
                   THEN serialization_failure('another batch released this order''s stock meanwhile')
               WHEN (SELECT count(*) FROM recorded) <> cardinality($13::uuid[])
                   THEN serialization_failure('a message was recorded by another consumer')
               ELSE true
           END AS "written!""#,
        &change_ids,
        &deltas,
        &versions as &[Option<i64>],
        &judged_ids,
        &judged_versions,
        &order_ids,
        &states as &[&str],
        &items as &[Json<&[LineItem]>],
        &reasons as &[Option<&str>],
        &write.released,
        ReservationState::Applied.as_str(),
        ReservationState::Released.as_str(),
        &message_ids,
        &kinds as &[&str],
        &outbox.event_ids,
        &outbox.exchanges as &[&str],
        &outbox.routing_keys as &[&str],
        &outbox.payloads as &[&serde_json::Value],
        &outbox.headers as &[&serde_json::Value],
    )
    .fetch_one(conn)
    .await
    .map(drop)
}

pub async fn find(conn: Conn<'_>, order_id: OrderId) -> sqlx::Result<Option<Reservation>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return mysql::find(conn, order_id).await,
    };
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
