//! What settling a batch of verdicts reads and writes, one statement each on PostgreSQL
//! (checked against the migrations at build time, offline data in `.sqlx/`); on MySQL, the
//! statements of `order_mysql::settle`.

use chrono::{DateTime, Utc};
use platform::messaging::outbox::{NewOutboxRow, OutboxColumns};
use platform::storage::Conn;
use shared::events::RejectionReason;
use uuid::Uuid;

use crate::orders::OrderStatus;
use crate::orders::payment::PaymentWindow;

/// What settling a batch needs to know of an order.
#[derive(Debug, Clone)]
pub struct SettlementRow {
    pub order_id: Uuid,
    pub status: OrderStatus,
    pub released: bool,
    pub created_at: DateTime<Utc>,
}

/// What a settling batch reads, in one statement: its orders as they are now, and which of
/// its message ids were recorded before. Nothing is locked: the write
/// ([`write_settlement`]) checks that what it relied on still holds.
pub async fn read_for_settlement(
    conn: Conn<'_>,
    order_ids: &[Uuid],
    message_ids: &[Uuid],
) -> sqlx::Result<(Vec<SettlementRow>, Vec<Uuid>)> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let (rows, seen) =
                order_mysql::settle::read_for_settlement(conn, order_ids, message_ids).await?;
            let orders = rows
                .into_iter()
                .map(|row| {
                    Ok(SettlementRow {
                        order_id: row.order_id,
                        status: OrderStatus::read(&row.status)
                            .map_err(|e| crate::orders::queries::strict("status", e))?,
                        released: row.released,
                        created_at: row.created_at,
                    })
                })
                .collect::<sqlx::Result<_>>()?;
            return Ok((orders, seen));
        }
    };
    // One row at least (the left join), so the recorded ids come back with no order found.
    let rows = sqlx::query!(
        r#"SELECT s.seen AS "seen!", o.order_id AS "order_id?", o.status AS "status?",
                  o.released_at IS NOT NULL AS "released?", o.created_at AS "created_at?"
           FROM (SELECT ARRAY(SELECT message_id FROM processed_messages
                              WHERE message_id = ANY($2)) AS seen) AS s
           LEFT JOIN (unnest($1::uuid[]) AS w (order_id)
                      JOIN orders AS o ON o.order_id = ANY($1) AND o.order_id = w.order_id)
                  ON true"#,
        order_ids,
        message_ids,
    )
    .fetch_all(conn)
    .await?;
    let seen = rows.first().map(|row| row.seen.clone()).unwrap_or_default();
    let orders = rows
        .into_iter()
        .filter_map(|row| {
            Some(Ok(SettlementRow {
                order_id: row.order_id?,
                status: match OrderStatus::read(&row.status?) {
                    Ok(status) => status,
                    Err(e) => return Some(Err(crate::orders::queries::strict("status", e))),
                },
                released: row.released.unwrap_or(false),
                created_at: row.created_at?,
            }))
        })
        .collect::<sqlx::Result<_>>()?;
    Ok((orders, seen))
}

/// Everything a settled batch decided, to write in one statement.
#[derive(Debug, Default)]
pub struct SettlementWrite<'a> {
    /// Orders leaving `PENDING`: (order, status, reason).
    pub settled: Vec<(Uuid, OrderStatus, Option<RejectionReason>)>,
    /// Cancelled or expired orders whose stock inventory now holds no more.
    pub released: Vec<Uuid>,
    /// The messages applied: (id, routing key).
    pub recorded: Vec<(Uuid, &'a str)>,
    pub outbox: &'a [NewOutboxRow],
}

/// Writes a settled batch in one statement, which commits on its own (or in the caller's
/// transaction): the orders leaving `PENDING` (due `window` from now by this database's
/// clock when it sends them to `AWAITING_PAYMENT`, docs/contract.md §3.1.1), the releases,
/// the message ids and the outbox rows. All of it, or, when an order left `PENDING` since the
/// batch read it or another consumer recorded one of the message ids meanwhile, nothing, with
/// a serialization failure (40001): the caller judges the batch again on what it then reads.
pub async fn write_settlement(
    conn: Conn<'_>,
    write: &SettlementWrite<'_>,
    window: PaymentWindow,
) -> sqlx::Result<()> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let mysql = order_mysql::settle::SettlementWrite {
                settled: write
                    .settled
                    .iter()
                    .map(|(order_id, status, reason)| order_mysql::settle::Settled {
                        order_id: *order_id,
                        status: status.as_str(),
                        reason: reason.map(RejectionReason::as_str),
                    })
                    .collect(),
                released: write.released.clone(),
                recorded: write.recorded.clone(),
                outbox: write.outbox.iter().map(NewOutboxRow::as_mysql).collect(),
            };
            return order_mysql::settle::write_settlement(conn, &mysql, window.duration()).await;
        }
    };
    let ids: Vec<Uuid> = write.settled.iter().map(|s| s.0).collect();
    let statuses: Vec<&str> = write.settled.iter().map(|s| s.1.as_str()).collect();
    let reasons: Vec<Option<&str>> = write
        .settled
        .iter()
        .map(|s| s.2.map(RejectionReason::as_str))
        .collect();
    let (message_ids, kinds): (Vec<Uuid>, Vec<&str>) = write.recorded.iter().copied().unzip();
    let outbox = OutboxColumns::of(write.outbox);
    // The statement may run on a session that plans it once for any values (`planned_once`),
    // so every table is reached through its key, whatever the batch: one `= ANY` per
    // search (an `OR` of two would read the whole index), and each join to an `unnest`
    // also carries the key's `= ANY` (e2e/tests/flow/plans.rs checks the generic plan). The
    // statuses are parameters: written out, they match the predicates of the partial indexes
    // of pending and of given-back orders, and the generic plan read one of those whole.
    // The CTEs touch disjoint rows (`moved` only PENDING orders, `released` only cancelled or
    // expired ones); the final SELECT counts what each did and raises when a guard fell short.
    // The orders are locked in ascending id before either update touches one (`ordered`,
    // whose count both updates need first), and the message ids inserted in ascending order:
    // two batches sharing orders or ids never wait on each other in a cycle.
    sqlx::query_scalar!(
        r#"WITH ordered AS MATERIALIZED (
               SELECT order_id FROM orders WHERE order_id = ANY($1::uuid[] || $5::uuid[])
                ORDER BY order_id FOR UPDATE
           ), moved AS (
               UPDATE orders AS o
                  SET status = v.status, rejection_reason = v.reason, updated_at = now(),
                      payment_due_at = CASE WHEN v.status = 'AWAITING_PAYMENT'
                                            THEN now() + make_interval(secs => $4) END
                 FROM unnest($1::uuid[], $2::text[], $3::text[]) AS v (order_id, status, reason)
                WHERE o.order_id = ANY($1) AND o.order_id = v.order_id
                  AND o.status = $13 AND (SELECT count(*) FROM ordered) > 0
               RETURNING 1
           ), released AS (
               UPDATE orders AS o SET released_at = now()
                 FROM unnest($5::uuid[]) AS r (order_id)
                WHERE o.order_id = ANY($5) AND o.order_id = r.order_id
                  AND o.status = ANY($14) AND o.released_at IS NULL
                  AND (SELECT count(*) FROM ordered) > 0
           ), recorded AS (
               INSERT INTO processed_messages (message_id, kind)
               SELECT * FROM unnest($6::uuid[], $7::text[]) AS m (message_id, kind)
                ORDER BY message_id
                   ON CONFLICT DO NOTHING
               RETURNING 1
           ), queued AS (
               INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
               SELECT * FROM unnest($8::uuid[], $9::text[], $10::text[], $11::jsonb[],
                                    $12::jsonb[])
           )
           SELECT CASE
               WHEN (SELECT count(*) FROM moved) <> cardinality($1::uuid[])
                   THEN serialization_failure('an order left PENDING since the batch read it')
               WHEN (SELECT count(*) FROM recorded) <> cardinality($6::uuid[])
                   THEN serialization_failure('a message of the batch was recorded meanwhile')
               ELSE true
           END AS "written!""#,
        &ids,
        &statuses as &[&str],
        &reasons as &[Option<&str>],
        window.as_secs_f64(),
        &write.released,
        &message_ids,
        &kinds as &[&str],
        &outbox.event_ids,
        &outbox.exchanges as &[&str],
        &outbox.routing_keys as &[&str],
        &outbox.payloads as &[&serde_json::Value],
        &outbox.headers as &[&serde_json::Value],
        OrderStatus::Pending.as_str(),
        &[
            OrderStatus::Cancelled.as_str(),
            OrderStatus::Expired.as_str()
        ] as &[&str],
    )
    .fetch_one(conn)
    .await
    .map(drop)
}
