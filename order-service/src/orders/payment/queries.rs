//! The statements of the payment window: the guarded confirm, the expiry of due orders, and
//! the probe that tells the expiry loop whether any order is due. The database's clock
//! (`now()`, the transaction's start; MySQL's `NOW(6)`, the statement's) is the one clock
//! that decides.

use platform::storage::Conn;
use shared::events::LineItem;
use shared::ids::OrderId;
use sqlx::types::Json;

use crate::orders::queries::{OrderRow, StoredOrder, typed, typed_mysql};

/// Confirms the order if it still waits and its window is open: the clock decides here, in
/// the guard, whether or not the expiry has run. The row as confirmed, or `None`.
pub(super) async fn confirm_open(
    conn: Conn<'_>,
    order_id: OrderId,
) -> sqlx::Result<Option<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = order_mysql::payment::confirm_open(conn, order_id.0).await?;
            return row.map(OrderRow::try_from).transpose();
        }
    };
    sqlx::query_as!(
        StoredOrder,
        r#"UPDATE orders SET status = 'CONFIRMED', updated_at = now()
           WHERE order_id = $1 AND status = 'AWAITING_PAYMENT' AND payment_due_at > now()
           RETURNING order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                     rejection_reason, payment_due_at, created_at, updated_at"#,
        order_id.0,
    )
    .fetch_optional(conn)
    .await?
    .map(OrderRow::try_from)
    .transpose()
}

/// Moves to `EXPIRED` up to `limit` orders still `AWAITING_PAYMENT` at or after their
/// `payment_due_at` (only `only`'s when given), earliest due first. Rows another transaction
/// holds are skipped: another instance expires them, or a confirm or cancel decides them (the
/// caller's own locks do not count, so a cancel that locked its order expires it here). The
/// rows as expired, earliest due first.
pub(super) async fn expire_due(
    conn: Conn<'_>,
    only: Option<OrderId>,
    limit: i64,
) -> sqlx::Result<Vec<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows = order_mysql::payment::expire_due(conn, only.map(|o| o.0), limit).await?;
            let mut orders = typed_mysql(rows)?;
            orders.sort_by_key(|order| order.payment_due_at);
            return Ok(orders);
        }
    };
    let rows = sqlx::query_as!(
        StoredOrder,
        r#"UPDATE orders SET status = 'EXPIRED', updated_at = now()
           WHERE status = 'AWAITING_PAYMENT' AND order_id IN (
               SELECT order_id FROM orders
               WHERE status = 'AWAITING_PAYMENT' AND payment_due_at <= now()
                 AND ($1::uuid IS NULL OR order_id = $1)
               ORDER BY payment_due_at LIMIT $2 FOR UPDATE SKIP LOCKED)
           RETURNING order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                     rejection_reason, payment_due_at, created_at, updated_at"#,
        only.map(|order| order.0),
        limit,
    )
    .fetch_all(conn)
    .await?;
    // RETURNING keeps no order: the claim's is restored here.
    let mut orders = typed(rows)?;
    orders.sort_by_key(|order| order.payment_due_at);
    Ok(orders)
}

/// Whether any order waits past its due time: one cheap read on the partial index, so an idle
/// expiry loop opens no transaction.
pub(super) async fn any_due(conn: Conn<'_>) -> sqlx::Result<bool> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => return order_mysql::payment::any_due(conn).await,
    };
    sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM orders
               WHERE status = 'AWAITING_PAYMENT' AND payment_due_at <= now()) AS "due!""#
    )
    .fetch_one(conn)
    .await
}
