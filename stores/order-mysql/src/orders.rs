//! The `orders` table: one order by id, a page of them, and a status change decided in code.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::MySqlConnection;
use uuid::Uuid;

/// An order as stored. `items` is the JSON text of its line items (MariaDB's `JSON` is text);
/// status and reason are the CHECK-ed text, read into types by order-service.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderRecord {
    pub order_id: Uuid,
    pub user_id: i64,
    pub items: String,
    pub amount: Decimal,
    pub status: String,
    pub rejection_reason: Option<String>,
    pub payment_due_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub async fn find(conn: &mut MySqlConnection, order_id: Uuid) -> sqlx::Result<Option<OrderRecord>> {
    sqlx::query_as!(
        OrderRecord,
        "SELECT order_id AS `order_id: Uuid`, user_id, items, amount, status, rejection_reason,
                payment_due_at AS `payment_due_at: DateTime<Utc>`,
                created_at AS `created_at: DateTime<Utc>`, updated_at AS `updated_at: DateTime<Utc>`
         FROM orders WHERE order_id = ?",
        order_id,
    )
    .fetch_optional(conn)
    .await
}

/// [`find`], the row locked until the transaction ends.
pub async fn find_for_update(
    conn: &mut MySqlConnection,
    order_id: Uuid,
) -> sqlx::Result<Option<OrderRecord>> {
    sqlx::query_as!(
        OrderRecord,
        "SELECT order_id AS `order_id: Uuid`, user_id, items, amount, status, rejection_reason,
                payment_due_at AS `payment_due_at: DateTime<Utc>`,
                created_at AS `created_at: DateTime<Utc>`, updated_at AS `updated_at: DateTime<Utc>`
         FROM orders WHERE order_id = ? FOR UPDATE",
        order_id,
    )
    .fetch_optional(conn)
    .await
}

/// Filters and position of one page, newest first.
#[derive(Debug, Clone, Copy, Default)]
pub struct Page<'a> {
    pub user_id: Option<i64>,
    pub status: Option<&'a str>,
    /// Strictly after this `(created_at, order_id)`.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    pub fetch: i64,
}

/// One statement for every filter combination: a NULL parameter switches its filter off. The
/// position is written out as `created_at < ? OR (created_at = ? AND order_id < ?)`: MySQL
/// compares row values, but reads an index range only for the expanded form.
pub async fn list(conn: &mut MySqlConnection, page: Page<'_>) -> sqlx::Result<Vec<OrderRecord>> {
    let (after_at, after_id) = page.after.unzip();
    sqlx::query_as!(
        OrderRecord,
        "SELECT order_id AS `order_id: Uuid`, user_id, items, amount, status, rejection_reason,
                payment_due_at AS `payment_due_at: DateTime<Utc>`,
                created_at AS `created_at: DateTime<Utc>`, updated_at AS `updated_at: DateTime<Utc>`
         FROM orders
         WHERE (? IS NULL OR user_id = ?)
           AND (? IS NULL OR status = ?)
           AND (? IS NULL OR created_at < ? OR (created_at = ? AND order_id < ?))
         ORDER BY created_at DESC, order_id DESC
         LIMIT ?",
        page.user_id,
        page.user_id,
        page.status,
        page.status,
        after_at,
        after_at,
        after_at,
        after_id,
        page.fetch,
    )
    .fetch_all(conn)
    .await
}

/// Sets the status of an order the caller locked ([`find_for_update`]); the row as it now is.
pub async fn set_status(
    conn: &mut MySqlConnection,
    order_id: Uuid,
    to: &str,
) -> sqlx::Result<OrderRecord> {
    sqlx::query!(
        "UPDATE orders SET status = ?, updated_at = NOW(6) WHERE order_id = ?",
        to,
        order_id,
    )
    .execute(&mut *conn)
    .await?;
    find(conn, order_id).await?.ok_or(sqlx::Error::RowNotFound)
}

/// The rows of `ids` (the ones that exist), in `ids`' order: how a write reads back what it
/// changed, MySQL having no `UPDATE … RETURNING`.
pub(crate) async fn find_all(
    conn: &mut MySqlConnection,
    ids: &[Uuid],
) -> sqlx::Result<Vec<OrderRecord>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as!(
        OrderRecord,
        "SELECT o.order_id AS `order_id: Uuid`, o.user_id, o.items, o.amount, o.status,
                o.rejection_reason, o.payment_due_at AS `payment_due_at: DateTime<Utc>`,
                o.created_at AS `created_at: DateTime<Utc>`,
                o.updated_at AS `updated_at: DateTime<Utc>`
         FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, id CHAR(36) PATH '$')) AS w
         STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(w.id, '-', ''))
         ORDER BY w.n",
        platform_mysql::json_ids(ids),
    )
    .fetch_all(conn)
    .await
}
