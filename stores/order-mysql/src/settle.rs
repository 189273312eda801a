//! Settling a batch of inventory's verdicts: one read of its orders and of the message ids
//! recorded before, and one transaction that writes what the batch decided, or nothing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, MySqlConnection};
use uuid::Uuid;

/// What settling needs to know of an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRecord {
    pub order_id: Uuid,
    pub status: String,
    pub released: bool,
    pub created_at: DateTime<Utc>,
}

/// The batch's orders as they are now, and which of its message ids were recorded before.
/// Nothing is locked: [`write_settlement`] checks that what the batch relied on still holds.
pub async fn read_for_settlement(
    conn: &mut MySqlConnection,
    order_ids: &[Uuid],
    message_ids: &[Uuid],
) -> sqlx::Result<(Vec<SettlementRecord>, Vec<Uuid>)> {
    let orders = if order_ids.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as!(
            SettlementRecord,
            "SELECT o.order_id AS `order_id: Uuid`, o.status,
                    o.released_at IS NOT NULL AS `released!: bool`,
                    o.created_at AS `created_at: DateTime<Utc>`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS w
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(w.id, '-', ''))",
            platform_mysql::json_ids(order_ids),
        )
        .fetch_all(&mut *conn)
        .await?
    };
    let seen = if message_ids.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar!(
            "SELECT m.message_id AS `message_id: Uuid`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS w
             STRAIGHT_JOIN processed_messages AS m FORCE INDEX (PRIMARY)
                ON m.message_id = UNHEX(REPLACE(w.id, '-', ''))",
            platform_mysql::json_ids(message_ids),
        )
        .fetch_all(&mut *conn)
        .await?
    };
    Ok((orders, seen))
}

/// An order leaving `PENDING`.
#[derive(Debug, Clone, Copy)]
pub struct Settled<'a> {
    pub order_id: Uuid,
    pub status: &'a str,
    pub reason: Option<&'a str>,
}

/// Everything a settled batch decided.
#[derive(Debug, Clone, Default)]
pub struct SettlementWrite<'a> {
    pub settled: Vec<Settled<'a>>,
    /// Cancelled or expired orders whose stock inventory holds no more.
    pub released: Vec<Uuid>,
    /// The messages applied, each id once: (id, routing key).
    pub recorded: Vec<(Uuid, &'a str)>,
    pub outbox: Vec<platform_mysql::outbox::NewRow<'a>>,
}

/// Writes a settled batch in one transaction (a savepoint inside the caller's): the orders
/// leaving `PENDING` (due `window` from now when they go to `AWAITING_PAYMENT`), the
/// releases, the message ids and the outbox rows. All of it or, when an order left `PENDING`
/// since the batch read it or another consumer recorded one of the message ids meanwhile,
/// nothing, with [`platform_mysql::serialization_failure`].
///
/// The orders are locked in ascending id before any is changed, and the message ids inserted
/// in ascending order, as on PostgreSQL: two batches sharing orders or ids never wait on each
/// other in a cycle.
pub async fn write_settlement(
    conn: &mut MySqlConnection,
    write: &SettlementWrite<'_>,
    window: Duration,
) -> sqlx::Result<()> {
    let mut tx = conn.begin().await?;
    let mut locked: Vec<Uuid> = write.settled.iter().map(|s| s.order_id).collect();
    locked.extend(&write.released);
    locked.sort_unstable();
    locked.dedup();
    if !locked.is_empty() {
        sqlx::query!(
            "SELECT o.order_id AS `order_id: Uuid`
             FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, id CHAR(36) PATH '$')) AS w
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(w.id, '-', ''))
             ORDER BY w.n FOR UPDATE",
            platform_mysql::json_ids(&locked),
        )
        .fetch_all(&mut *tx)
        .await?;
    }
    if !write.settled.is_empty() {
        let settled = serde_json::Value::Array(
            write
                .settled
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "id": s.order_id.to_string(), "status": s.status, "reason": s.reason,
                    })
                })
                .collect(),
        )
        .to_string();
        // Every row matched leaves PENDING, so the matched count is the moved count.
        let moved = sqlx::query!(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
                 id CHAR(36) PATH '$.id',
                 status VARCHAR(32) PATH '$.status',
                 reason TEXT PATH '$.reason')) AS v
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(v.id, '-', ''))
             SET o.status = v.status, o.rejection_reason = v.reason, o.updated_at = NOW(6),
                 o.payment_due_at = CASE WHEN v.status = 'AWAITING_PAYMENT'
                                         THEN NOW(6) + INTERVAL ? MICROSECOND END
             WHERE o.status = 'PENDING'",
            settled,
            platform_mysql::micros(window),
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved != write.settled.len() as u64 {
            return Err(platform_mysql::serialization_failure(
                "an order left PENDING since the batch read it",
            ));
        }
    }
    if !write.released.is_empty() {
        sqlx::query!(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS r
             STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(r.id, '-', ''))
             SET o.released_at = NOW(6)
             WHERE o.status IN ('CANCELLED', 'EXPIRED') AND o.released_at IS NULL",
            platform_mysql::json_ids(&write.released),
        )
        .execute(&mut *tx)
        .await?;
    }
    if !write.recorded.is_empty() {
        let mut recorded = write.recorded.clone();
        recorded.sort_unstable_by_key(|(id, _)| *id);
        let json = serde_json::Value::Array(
            recorded
                .iter()
                .map(|(id, kind)| serde_json::json!({ "id": id.to_string(), "kind": kind }))
                .collect(),
        )
        .to_string();
        // A plain INSERT: an id recorded meanwhile is a duplicate key, the batch's guard.
        let inserted = sqlx::query!(
            "INSERT INTO processed_messages (message_id, kind)
             SELECT UNHEX(REPLACE(m.id, '-', '')), m.kind
             FROM JSON_TABLE(?, '$[*]' COLUMNS (
                 n FOR ORDINALITY, id CHAR(36) PATH '$.id', kind TEXT PATH '$.kind')) AS m
             ORDER BY m.n",
            json,
        )
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(error) if crate::is_duplicate_key(&error) => {
                return Err(platform_mysql::serialization_failure(
                    "a message of the batch was recorded meanwhile",
                ));
            }
            Err(error) => return Err(error),
        }
    }
    platform_mysql::outbox::insert(&mut tx, &write.outbox).await?;
    tx.commit().await
}
