//! The consumer's hottest writes, each in one statement for the common case: one item, an
//! order seen for the first time. (`POST /deductions` has its own batch statement in
//! [`super::deductions`].)
//!
//! One statement is one implicit transaction in PostgreSQL: every row it writes commits
//! together or not at all, in one round trip instead of the six to ten of the general path.
//! That matters most under a product's lock, where every round trip is time the next holder
//! waits. Each statement either does the whole job or writes nothing, and then the caller
//! takes the general path (a transaction that reads, decides and explains):
//! - the conditional update matched no row (stock short, version moved, unknown product);
//! - a primary key was taken (the message id was seen before, the order already has a
//!   reservation or a tombstone): PostgreSQL fails the statement, undoing its update.
//!
//! The update is the conditional update of [`super::stock`], with the version the same
//! statement read: `... WHERE product_id = $1 AND stock >= $2 AND version = <read>`.

use platform::outbox::NewOutboxRow;
use shared::events::{LineItem, RejectionReason};
use shared::ids::OrderId;
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::reservations::ReservationState;

/// What a one-statement attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Attempt {
    /// Everything was written and committed.
    Done,
    /// Nothing was written: take the general path.
    NotTaken,
}

/// The conditional update of one item as a `deducted` CTE ($1 product, $2 quantity).
macro_rules! deducted_cte {
    () => {
        "deducted AS ( \
             UPDATE products SET stock = stock - $2, version = version + 1, updated_at = now() \
             WHERE product_id = $1 AND stock >= $2 \
               AND version = (SELECT version FROM products WHERE product_id = $1) \
             RETURNING product_id \
         )"
    };
}

/// Handles an order's creation message the first time: deducts its one item, stores the
/// `APPLIED` reservation, records the message id and writes `inventory.reserved` to the outbox.
pub async fn reserve(
    conn: &mut PgConnection,
    order_id: OrderId,
    item: LineItem,
    message_id: Uuid,
    kind: &str,
    event: NewOutboxRow,
) -> sqlx::Result<Attempt> {
    const STATEMENT: &str = concat!(
        "WITH ",
        deducted_cte!(),
        ", reserved AS ( \
                 INSERT INTO reservations (order_id, state, items) \
                 SELECT $3, $4, $5 FROM deducted RETURNING order_id \
             ), recorded AS ( \
                 INSERT INTO processed_messages (message_id, kind) SELECT $6, $7 FROM reserved \
             ) \
             INSERT INTO outbox (event_id, exchange, routing_key, payload, headers) \
             SELECT $8, $9, $10, $11, $12 FROM reserved"
    );
    let query = sqlx::query(STATEMENT)
        .bind(item.product_id.0)
        .bind(item.quantity)
        .bind(order_id.0)
        .bind(ReservationState::Applied.as_str())
        .bind(Json([item]))
        .bind(message_id)
        .bind(kind);
    let result = event.bind_to(query).execute(conn).await;
    attempt(result)
}

/// Handles an order's creation message the first time when the stock cannot cover it: stores
/// the `REJECTED` reservation, records the message id and writes `inventory.rejected`.
pub async fn reject(
    conn: &mut PgConnection,
    order_id: OrderId,
    items: &[LineItem],
    reason: RejectionReason,
    message_id: Uuid,
    kind: &str,
    event: NewOutboxRow,
) -> sqlx::Result<Attempt> {
    let query = sqlx::query(
        "WITH rejected AS ( \
             INSERT INTO reservations (order_id, state, items, rejection_reason) \
             VALUES ($1, $2, $3, $4) RETURNING order_id \
         ), recorded AS ( \
             INSERT INTO processed_messages (message_id, kind) SELECT $5, $6 FROM rejected \
         ) \
         INSERT INTO outbox (event_id, exchange, routing_key, payload, headers) \
         SELECT $7, $8, $9, $10, $11 FROM rejected",
    )
    .bind(order_id.0)
    .bind(ReservationState::Rejected.as_str())
    .bind(Json(items))
    .bind(reason.as_str())
    .bind(message_id)
    .bind(kind);
    let result = event.bind_to(query).execute(conn).await;
    attempt(result)
}

fn attempt(result: sqlx::Result<sqlx::postgres::PgQueryResult>) -> sqlx::Result<Attempt> {
    match result {
        Ok(done) if done.rows_affected() == 1 => Ok(Attempt::Done),
        Ok(_) => Ok(Attempt::NotTaken),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(Attempt::NotTaken),
        Err(error) => Err(error),
    }
}
