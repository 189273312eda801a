//! The `orders` table. Every statement is checked against the migrations at build time
//! (`sqlx::query!`, offline data in `.sqlx/`); on MySQL, the statements of `order_mysql`
//! (each function holds both, one `match` on the connection at its top).

use chrono::{DateTime, Utc};
use platform::storage::Conn;
use rust_decimal::Decimal;
use shared::events::{LineItem, RejectionReason};
use shared::ids::{OrderId, UserId};
use sqlx::types::Json;
use uuid::Uuid;

use crate::orders::{OrderStatus, status};

/// An order as stored, its status and rejection reason read into their types.
#[derive(Debug, Clone)]
pub struct OrderRow {
    pub order_id: Uuid,
    pub user_id: i64,
    pub items: Json<Vec<LineItem>>,
    pub amount: Decimal,
    pub status: OrderStatus,
    pub rejection_reason: Option<RejectionReason>,
    /// When the order stopped waiting for its payment, or will; `None` if it never waited.
    pub payment_due_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An order as the statements return it: status and reason are CHECK-ed text, read strictly
/// into an [`OrderRow`] (an unknown value fails the read, never becomes a default).
pub(crate) struct StoredOrder {
    pub(crate) order_id: Uuid,
    pub(crate) user_id: i64,
    pub(crate) items: Json<Vec<LineItem>>,
    pub(crate) amount: Decimal,
    pub(crate) status: String,
    pub(crate) rejection_reason: Option<String>,
    pub(crate) payment_due_at: Option<DateTime<Utc>>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

/// A status column that holds no status this code knows: a decode error, never a default.
pub(crate) fn strict(column: &str, error: status::UnknownStatus) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(error),
    }
}

impl TryFrom<StoredOrder> for OrderRow {
    type Error = sqlx::Error;

    fn try_from(row: StoredOrder) -> sqlx::Result<Self> {
        Ok(Self {
            order_id: row.order_id,
            user_id: row.user_id,
            items: row.items,
            amount: row.amount,
            status: OrderStatus::read(&row.status).map_err(|e| strict("status", e))?,
            rejection_reason: row
                .rejection_reason
                .map(|reason| {
                    status::read_rejection_reason(&reason)
                        .map_err(|e| strict("rejection_reason", e))
                })
                .transpose()?,
            payment_due_at: row.payment_due_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

pub(crate) fn typed(rows: Vec<StoredOrder>) -> sqlx::Result<Vec<OrderRow>> {
    rows.into_iter().map(OrderRow::try_from).collect()
}

impl TryFrom<order_mysql::OrderRecord> for OrderRow {
    type Error = sqlx::Error;

    /// MySQL's row: the same columns, the items as JSON text.
    fn try_from(row: order_mysql::OrderRecord) -> sqlx::Result<Self> {
        let items = serde_json::from_str(&row.items).map_err(|e| sqlx::Error::ColumnDecode {
            index: "items".to_owned(),
            source: Box::new(e),
        })?;
        OrderRow::try_from(StoredOrder {
            order_id: row.order_id,
            user_id: row.user_id,
            items: Json(items),
            amount: row.amount,
            status: row.status,
            rejection_reason: row.rejection_reason,
            payment_due_at: row.payment_due_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// MySQL's rows, read into [`OrderRow`]s.
pub(crate) fn typed_mysql(rows: Vec<order_mysql::OrderRecord>) -> sqlx::Result<Vec<OrderRow>> {
    rows.into_iter().map(OrderRow::try_from).collect()
}

pub async fn find(conn: Conn<'_>, order_id: OrderId) -> sqlx::Result<Option<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = order_mysql::orders::find(conn, order_id.0).await?;
            return row.map(OrderRow::try_from).transpose();
        }
    };
    sqlx::query_as!(
        StoredOrder,
        r#"SELECT order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                  rejection_reason, payment_due_at, created_at, updated_at
           FROM orders WHERE order_id = $1"#,
        order_id.0,
    )
    .fetch_optional(conn)
    .await?
    .map(OrderRow::try_from)
    .transpose()
}

/// Filters and position of one page of `GET /orders`.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub user_id: Option<UserId>,
    pub status: Option<OrderStatus>,
    /// Continue strictly after this `(created_at, order_id)`, newest first.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    /// Rows to fetch (the caller asks for one more than it shows).
    pub fetch: i64,
}

pub async fn list(conn: Conn<'_>, query: &ListQuery) -> sqlx::Result<Vec<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let page = order_mysql::orders::Page {
                user_id: query.user_id.map(|u| u.0),
                status: query.status.map(OrderStatus::as_str),
                after: query.after,
                fetch: query.fetch,
            };
            return typed_mysql(order_mysql::orders::list(conn, page).await?);
        }
    };
    // One statement for every filter combination: a NULL parameter switches its filter off.
    let (after_at, after_id) = query.after.unzip();
    let rows = sqlx::query_as!(
        StoredOrder,
        r#"SELECT order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                  rejection_reason, payment_due_at, created_at, updated_at
           FROM orders
           WHERE ($1::bigint IS NULL OR user_id = $1)
             AND ($2::text IS NULL OR status = $2)
             AND ($3::timestamptz IS NULL OR (created_at, order_id) < ($3, $4::uuid))
           ORDER BY created_at DESC, order_id DESC
           LIMIT $5"#,
        query.user_id.map(|u| u.0),
        query.status.map(OrderStatus::as_str),
        after_at,
        after_id,
        query.fetch,
    )
    .fetch_all(conn)
    .await?;
    typed(rows)
}

/// The order, locked until the transaction ends (for a status change decided in code).
pub async fn find_for_update(conn: Conn<'_>, order_id: OrderId) -> sqlx::Result<Option<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = order_mysql::orders::find_for_update(conn, order_id.0).await?;
            return row.map(OrderRow::try_from).transpose();
        }
    };
    sqlx::query_as!(
        StoredOrder,
        r#"SELECT order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                  rejection_reason, payment_due_at, created_at, updated_at
           FROM orders WHERE order_id = $1 FOR UPDATE"#,
        order_id.0,
    )
    .fetch_optional(conn)
    .await?
    .map(OrderRow::try_from)
    .transpose()
}

/// [`find_for_update`] for a caller: with an `owner`, another user's order is not there (its
/// existence is not revealed).
pub async fn find_owned_for_update(
    conn: Conn<'_>,
    order_id: OrderId,
    owner: Option<UserId>,
) -> sqlx::Result<Option<OrderRow>> {
    let row = find_for_update(conn, order_id).await?;
    Ok(row.filter(|row| owner.is_none_or(|owner| owner.0 == row.user_id)))
}

pub async fn set_status(
    conn: Conn<'_>,
    order_id: OrderId,
    to: OrderStatus,
) -> sqlx::Result<OrderRow> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = order_mysql::orders::set_status(conn, order_id.0, to.as_str()).await?;
            return row.try_into();
        }
    };
    sqlx::query_as!(
        StoredOrder,
        r#"UPDATE orders SET status = $2, updated_at = now() WHERE order_id = $1
           RETURNING order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                     rejection_reason, payment_due_at, created_at, updated_at"#,
        order_id.0,
        to.as_str(),
    )
    .fetch_one(conn)
    .await?
    .try_into()
}
