//! Reconciliation's claims, and the outbox check that keeps it from sending an order's event
//! again while one still waits to be published.

use std::time::Duration;

use sqlx::{Acquire, MySqlConnection};
use uuid::Uuid;

use crate::orders::{OrderRecord, find_all};

/// Claims up to `limit` `PENDING` orders that neither changed nor were reconciled for
/// `older_than`, oldest first, by stamping `reconciled_at`: other instances skip them for a
/// period, and no row stays locked while inventory is asked. The index is forced for the
/// reason [`crate::payment::expire_due`] gives.
pub async fn claim_stale_pending(
    conn: &mut MySqlConnection,
    older_than: Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRecord>> {
    let mut tx = conn.begin().await?;
    let stale = sqlx::query_scalar!(
        "SELECT order_id AS `order_id: Uuid` FROM orders FORCE INDEX (orders_pending_oldest_first)
         WHERE status = 'PENDING'
           AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at))
               < NOW(6) - INTERVAL ? MICROSECOND
         ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED",
        platform_mysql::micros(older_than),
        limit,
    )
    .fetch_all(&mut *tx)
    .await?;
    let claimed = stamp(&mut tx, &stale).await?;
    tx.commit().await?;
    Ok(claimed)
}

/// Claims up to `limit` `CANCELLED` or `EXPIRED` orders whose release is not recorded and
/// that were not changed or reconciled for `older_than`, least recently changed first;
/// stamped like [`claim_stale_pending`].
///
/// One range per status of `orders_given_back_unreleased`, `(status, released_at,
/// updated_at)`, each read in `updated_at` order and locked up to `limit` rows: the union is
/// sorted and its first `limit` stamped; the others stay locked (skipped by other
/// instances) only until this short transaction commits.
pub async fn claim_stale_cancelled(
    conn: &mut MySqlConnection,
    older_than: Duration,
    limit: i64,
) -> sqlx::Result<Vec<OrderRecord>> {
    let mut tx = conn.begin().await?;
    let micros = platform_mysql::micros(older_than);
    let mut candidates = sqlx::query!(
        "(SELECT order_id AS `order_id: Uuid`, updated_at AS `updated_at: chrono::DateTime<chrono::Utc>`
            FROM orders FORCE INDEX (orders_given_back_unreleased)
           WHERE status = 'CANCELLED' AND released_at IS NULL
             AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at))
                 < NOW(6) - INTERVAL ? MICROSECOND
           ORDER BY updated_at LIMIT ? FOR UPDATE SKIP LOCKED)
         UNION ALL
         (SELECT order_id, updated_at
            FROM orders FORCE INDEX (orders_given_back_unreleased)
           WHERE status = 'EXPIRED' AND released_at IS NULL
             AND GREATEST(updated_at, COALESCE(reconciled_at, updated_at))
                 < NOW(6) - INTERVAL ? MICROSECOND
           ORDER BY updated_at LIMIT ? FOR UPDATE SKIP LOCKED)",
        micros,
        limit,
        micros,
        limit,
    )
    .fetch_all(&mut *tx)
    .await?;
    candidates.sort_by_key(|row| (row.updated_at, row.order_id));
    let oldest: Vec<Uuid> = candidates
        .iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|row| row.order_id)
        .collect();
    let claimed = stamp(&mut tx, &oldest).await?;
    tx.commit().await?;
    Ok(claimed)
}

/// Stamps `reconciled_at` on `ids`, locked by the caller; the rows as stamped, in `ids`' order.
async fn stamp(conn: &mut MySqlConnection, ids: &[Uuid]) -> sqlx::Result<Vec<OrderRecord>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query!(
        "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS c
         STRAIGHT_JOIN orders AS o FORCE INDEX (PRIMARY) ON o.order_id = UNHEX(REPLACE(c.id, '-', ''))
         SET o.reconciled_at = NOW(6)",
        platform_mysql::json_ids(ids),
    )
    .execute(&mut *conn)
    .await?;
    find_all(conn, ids).await
}

/// Which of `orders` have an event of `routing_key` still waiting in the outbox to be
/// published. `FORCE INDEX (outbox_due)`: only the pending rows are read, however many were
/// sent.
pub async fn unsent(
    conn: &mut MySqlConnection,
    routing_key: &str,
    orders: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    // Compared as the ids' 16 bytes: JSON_VALUE's text and JSON_TABLE's columns carry
    // different collations, which MySQL refuses to compare.
    sqlx::query_scalar!(
        "SELECT DISTINCT UNHEX(REPLACE(JSON_VALUE(payload, '$.payload.order_id'), '-', ''))
                AS `order_id!: Uuid`
         FROM outbox FORCE INDEX (outbox_due)
         WHERE status = 'pending' AND routing_key = ?
           AND UNHEX(REPLACE(JSON_VALUE(payload, '$.payload.order_id'), '-', '')) IN (
               SELECT UNHEX(REPLACE(w.id, '-', ''))
               FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS w)",
        routing_key,
        platform_mysql::json_ids(orders),
    )
    .fetch_all(conn)
    .await
}
