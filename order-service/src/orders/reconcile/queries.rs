//! The statements reconciliation claims its orders with, and the outbox checks that keep
//! it from sending an order's event again while one still waits to be published.

use std::collections::HashSet;

use platform::storage::Conn;
use shared::events::LineItem;
use shared::ids::OrderId;
use sqlx::types::Json;

use crate::orders::queries::{OrderRow, StoredOrder, typed, typed_mysql};

/// Claims up to `limit` `PENDING` orders that neither changed nor were reconciled for
/// `older_than`, oldest first, by stamping `reconciled_at`: concurrent reconcilers (one per
/// instance) skip them for a period, and no row stays locked while inventory is asked.
pub async fn claim_stale_pending(
    conn: Conn<'_>,
    older_than: std::time::Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows = order_mysql::reconcile::claim_stale_pending(conn, older_than, limit);
            return typed_mysql(rows.await?);
        }
    };
    let rows = sqlx::query_as!(
        StoredOrder,
        r#"UPDATE orders SET reconciled_at = now()
           WHERE order_id IN (
               SELECT order_id FROM orders
               WHERE status = 'PENDING'
                 AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at))
                     < now() - make_interval(secs => $1)
               ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
           RETURNING order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                     rejection_reason, payment_due_at, created_at, updated_at"#,
        older_than.as_secs_f64(),
        limit,
    )
    .fetch_all(conn)
    .await?;
    // RETURNING keeps no order: the claim's is restored here.
    let mut orders = typed(rows)?;
    orders.sort_by_key(|order| order.created_at);
    Ok(orders)
}

/// Claims up to `limit` `CANCELLED` or `EXPIRED` orders whose release is not recorded,
/// cancelled or expired (their last change) and not reconciled for `older_than`, oldest
/// first; stamped like
/// [`claim_stale_pending`], so an order is asked about and its cancellation sent again at
/// most once a period, by one instance.
pub async fn claim_stale_cancelled(
    conn: Conn<'_>,
    older_than: std::time::Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRow>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows = order_mysql::reconcile::claim_stale_cancelled(conn, older_than, limit);
            return typed_mysql(rows.await?);
        }
    };
    let rows = sqlx::query_as!(
        StoredOrder,
        r#"UPDATE orders SET reconciled_at = now()
           WHERE order_id IN (
               SELECT order_id FROM orders
               WHERE status IN ('CANCELLED', 'EXPIRED') AND released_at IS NULL
                 AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at))
                     < now() - make_interval(secs => $1)
               ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
           RETURNING order_id, user_id, items AS "items: Json<Vec<LineItem>>", amount, status,
                     rejection_reason, payment_due_at, created_at, updated_at"#,
        older_than.as_secs_f64(),
        limit,
    )
    .fetch_all(conn)
    .await?;
    let mut orders = typed(rows)?;
    orders.sort_by_key(|order| order.updated_at);
    Ok(orders)
}

/// Which of `orders` have an event of `routing_key` (`order.created` or `order.cancelled`,
/// the original or a copy sent again) still waiting in the outbox to be published: one
/// statement for a whole round's orders, which reads only the pending rows (their partial
/// index keeps it to the backlog, however many rows were sent).
pub async fn unsent(
    conn: Conn<'_>,
    routing_key: &str,
    orders: &[OrderId],
) -> sqlx::Result<HashSet<OrderId>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let ids: Vec<uuid::Uuid> = orders.iter().map(|order| order.0).collect();
            let unsent = order_mysql::reconcile::unsent(conn, routing_key, &ids).await?;
            return Ok(unsent.into_iter().map(OrderId).collect());
        }
    };
    let ids: Vec<String> = orders.iter().map(|order| order.0.to_string()).collect();
    let unsent = sqlx::query_scalar!(
        r#"SELECT DISTINCT (payload->'payload'->>'order_id')::uuid AS "order_id!"
           FROM outbox
           WHERE status = 'pending' AND routing_key = $2
             AND payload->'payload'->>'order_id' = ANY($1)"#,
        &ids[..],
        routing_key,
    )
    .fetch_all(conn)
    .await?;
    Ok(unsent.into_iter().map(OrderId).collect())
}
