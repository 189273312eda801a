//! The payment window: the guarded confirm, the expiry of due orders and the probe that
//! tells the expiry loop whether any order is due. The database's clock decides.

use sqlx::{Acquire, MySqlConnection};
use uuid::Uuid;

use crate::orders::{OrderRecord, find, find_all};

/// Confirms the order if it still waits and its window is open; the row as confirmed, or
/// `None`. Every row the `WHERE` matches changes status, so the matched count the driver
/// reports is the number confirmed.
pub async fn confirm_open(
    conn: &mut MySqlConnection,
    order_id: Uuid,
) -> sqlx::Result<Option<OrderRecord>> {
    let confirmed = sqlx::query!(
        "UPDATE orders SET status = 'CONFIRMED', updated_at = NOW(6)
         WHERE order_id = ? AND status = 'AWAITING_PAYMENT' AND payment_due_at > NOW(6)",
        order_id,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if confirmed == 0 {
        return Ok(None);
    }
    find(conn, order_id).await
}

/// Moves to `EXPIRED` up to `limit` orders still `AWAITING_PAYMENT` at or after their due
/// time (only `only` when given), earliest due first, skipping rows another transaction
/// holds; the rows as expired, earliest due first.
///
/// `FORCE INDEX (orders_awaiting_payment_due)`, `(status, payment_due_at)`: read in that
/// order the locking read stops after `limit` rows; a plan that sorts would lock every
/// waiting order it read first, and another instance's `SKIP LOCKED` would find none.
pub async fn expire_due(
    conn: &mut MySqlConnection,
    only: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<OrderRecord>> {
    let mut tx = conn.begin().await?;
    let due = match only {
        // One order (a cancel past its due time): read by its key, not by walking the due
        // index up to it, which would lock every due order on the way.
        Some(order_id) => {
            sqlx::query_scalar!(
                "SELECT order_id AS `order_id: Uuid` FROM orders FORCE INDEX (PRIMARY)
                 WHERE order_id = ? AND status = 'AWAITING_PAYMENT' AND payment_due_at <= NOW(6)
                 FOR UPDATE SKIP LOCKED",
                order_id,
            )
            .fetch_all(&mut *tx)
            .await?
        }
        None => {
            sqlx::query_scalar!(
                "SELECT order_id AS `order_id: Uuid`
                 FROM orders FORCE INDEX (orders_awaiting_payment_due)
                 WHERE status = 'AWAITING_PAYMENT' AND payment_due_at <= NOW(6)
                 ORDER BY payment_due_at LIMIT ? FOR UPDATE SKIP LOCKED",
                limit,
            )
            .fetch_all(&mut *tx)
            .await?
        }
    };
    if due.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS d
         STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(d.id, '-', ''))
         SET o.status = 'EXPIRED', o.updated_at = NOW(6)
         WHERE o.status = 'AWAITING_PAYMENT'",
        platform_mysql::json_ids(&due),
    )
    .execute(&mut *tx)
    .await?;
    let expired = find_all(&mut tx, &due).await?;
    tx.commit().await?;
    Ok(expired)
}

/// Whether any order waits past its due time: one read of the index's first entry.
pub async fn any_due(conn: &mut MySqlConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        "SELECT EXISTS (SELECT 1 FROM orders FORCE INDEX (orders_awaiting_payment_due)
             WHERE status = 'AWAITING_PAYMENT' AND payment_due_at <= NOW(6)) AS `due!: bool`"
    )
    .fetch_one(conn)
    .await
}
