//! The `orders` table.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use shared::events::{LineItem, RejectionReason};
use shared::ids::{OrderId, UserId};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::domain::{OrderStatus, status};

/// An order as stored. Its status and rejection reason are CHECK-ed text read strictly into
/// their types: an unknown value fails the read (see the `FromRow` below), never a default.
#[derive(Debug, Clone)]
pub struct OrderRow {
    pub order_id: Uuid,
    pub user_id: i64,
    pub items: Json<Vec<LineItem>>,
    pub amount: Decimal,
    pub status: OrderStatus,
    pub rejection_reason: Option<RejectionReason>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl<'r> sqlx::FromRow<'r, PgRow> for OrderRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        let status: String = row.try_get("status")?;
        let rejection_reason: Option<String> = row.try_get("rejection_reason")?;
        let strict = |column: &str, error: status::UnknownStatus| sqlx::Error::ColumnDecode {
            index: column.to_owned(),
            source: Box::new(error),
        };
        let status = OrderStatus::read(&status).map_err(|e| strict("status", e))?;
        let rejection_reason = rejection_reason
            .map(|reason| {
                status::read_rejection_reason(&reason).map_err(|e| strict("rejection_reason", e))
            })
            .transpose()?;
        Ok(Self {
            order_id: row.try_get("order_id")?,
            user_id: row.try_get("user_id")?,
            items: row.try_get("items")?,
            amount: row.try_get("amount")?,
            status,
            rejection_reason,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
        })
    }
}

pub async fn find(conn: &mut PgConnection, order_id: OrderId) -> sqlx::Result<Option<OrderRow>> {
    sqlx::query_as(
        "SELECT order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at \
         FROM orders WHERE order_id = $1",
    )
    .bind(order_id.0)
    .fetch_optional(conn)
    .await
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

pub async fn list(conn: &mut PgConnection, query: &ListQuery) -> sqlx::Result<Vec<OrderRow>> {
    // One statement for every filter combination: a NULL parameter switches its filter off.
    let (after_at, after_id) = query.after.unzip();
    sqlx::query_as(
        "SELECT order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at \
         FROM orders \
         WHERE ($1::bigint IS NULL OR user_id = $1) \
           AND ($2::text IS NULL OR status = $2) \
           AND ($3::timestamptz IS NULL OR (created_at, order_id) < ($3, $4::uuid)) \
         ORDER BY created_at DESC, order_id DESC \
         LIMIT $5",
    )
    .bind(query.user_id.map(|u| u.0))
    .bind(query.status.map(OrderStatus::as_str))
    .bind(after_at)
    .bind(after_id)
    .bind(query.fetch)
    .fetch_all(conn)
    .await
}

/// What settling a batch needs to know of an order.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SettlementRow {
    pub order_id: Uuid,
    #[sqlx(try_from = "String")]
    pub status: OrderStatus,
    pub released: bool,
    pub created_at: DateTime<Utc>,
}

/// The orders of `order_ids`, locked until the transaction ends, in ascending id (two
/// batches lock their common orders in the same order, so they never deadlock).
pub async fn lock_for_settlement(
    conn: &mut PgConnection,
    order_ids: &[Uuid],
) -> sqlx::Result<Vec<SettlementRow>> {
    sqlx::query_as(
        "SELECT order_id, status, released_at IS NOT NULL AS released, created_at \
         FROM orders WHERE order_id = ANY($1) ORDER BY order_id FOR UPDATE",
    )
    .bind(order_ids)
    .fetch_all(conn)
    .await
}

/// Moves every `(order, status, reason)` from `PENDING` in one statement; how many moved.
pub async fn settle_pending_all(
    conn: &mut PgConnection,
    settled: &[(Uuid, OrderStatus, Option<RejectionReason>)],
) -> sqlx::Result<u64> {
    if settled.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = settled.iter().map(|s| s.0).collect();
    let statuses: Vec<&str> = settled.iter().map(|s| s.1.as_str()).collect();
    let reasons: Vec<Option<&str>> = settled
        .iter()
        .map(|s| s.2.map(RejectionReason::as_str))
        .collect();
    let done = sqlx::query(
        "UPDATE orders o SET status = v.status, rejection_reason = v.reason, updated_at = now() \
         FROM unnest($1::uuid[], $2::text[], $3::text[]) AS v(order_id, status, reason) \
         WHERE o.order_id = v.order_id AND o.status = 'PENDING'",
    )
    .bind(ids)
    .bind(statuses)
    .bind(reasons)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Records that inventory holds nothing any more (its stock came back, or none was ever
/// taken) for those of the cancelled `order_ids` not yet known so, in one statement.
pub async fn record_released_all(conn: &mut PgConnection, order_ids: &[Uuid]) -> sqlx::Result<()> {
    if order_ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE orders SET released_at = now() \
         WHERE order_id = ANY($1) AND status = 'CANCELLED' AND released_at IS NULL",
    )
    .bind(order_ids)
    .execute(conn)
    .await
    .map(drop)
}

/// The order, locked until the transaction ends (for a status change decided in code).
pub async fn find_for_update(
    conn: &mut PgConnection,
    order_id: OrderId,
) -> sqlx::Result<Option<OrderRow>> {
    sqlx::query_as(
        "SELECT order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at \
         FROM orders WHERE order_id = $1 FOR UPDATE",
    )
    .bind(order_id.0)
    .fetch_optional(conn)
    .await
}

pub async fn set_status(
    conn: &mut PgConnection,
    order_id: OrderId,
    to: OrderStatus,
) -> sqlx::Result<OrderRow> {
    sqlx::query_as(
        "UPDATE orders SET status = $2, updated_at = now() WHERE order_id = $1 \
         RETURNING order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at",
    )
    .bind(order_id.0)
    .bind(to.as_str())
    .fetch_one(conn)
    .await
}

/// Claims up to `limit` `PENDING` orders that neither changed nor were reconciled for
/// `older_than`, oldest first, by stamping `reconciled_at`: concurrent reconcilers (one per
/// instance) skip them for a period, and no row stays locked while inventory is asked.
pub async fn claim_stale_pending(
    conn: &mut PgConnection,
    older_than: std::time::Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRow>> {
    sqlx::query_as(
        "UPDATE orders SET reconciled_at = now() \
         WHERE order_id IN ( \
             SELECT order_id FROM orders \
             WHERE status = 'PENDING' \
               AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at)) < now() - make_interval(secs => $1) \
             ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at",
    )
    .bind(older_than.as_secs_f64())
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Claims up to `limit` `CANCELLED` orders whose release is not recorded, cancelled (their
/// last change) and not reconciled for `older_than`, oldest cancellation first; stamped like
/// [`claim_stale_pending`], so an order is asked about and its cancellation sent again at
/// most once a period, by one instance.
pub async fn claim_stale_cancelled(
    conn: &mut PgConnection,
    older_than: std::time::Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRow>> {
    sqlx::query_as(
        "UPDATE orders SET reconciled_at = now() \
         WHERE order_id IN ( \
             SELECT order_id FROM orders \
             WHERE status = 'CANCELLED' AND released_at IS NULL \
               AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at)) < now() - make_interval(secs => $1) \
             ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at",
    )
    .bind(older_than.as_secs_f64())
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Whether an `order.cancelled` of the order still waits in the outbox to be published (the
/// partial index of pending rows keeps this to the backlog, however many rows were sent).
pub async fn cancellation_pending(
    conn: &mut PgConnection,
    order_id: OrderId,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS ( \
             SELECT 1 FROM outbox \
             WHERE status = 'pending' AND routing_key = $2 \
               AND payload->'payload'->>'order_id' = $1::text)",
    )
    .bind(order_id.0)
    .bind(shared::keys::ORDER_CANCELLED)
    .fetch_one(conn)
    .await
}
