//! A direct deduction in one statement for the common case: one item, an id seen for the
//! first time. (Reservations for order events are written by the consumer's batch path,
//! `messaging::batch`, with multi-row statements instead.)
//!
//! One statement is one implicit transaction in PostgreSQL: every row it writes commits
//! together or not at all, in one round trip instead of the six to ten of the general path.
//! That matters most under a product's lock, where every round trip is time the next holder
//! waits. Each statement either does the whole job or writes nothing, and then the caller
//! takes the general path (a transaction that reads, decides and explains):
//! - the conditional update matched no row (stock short, version moved, unknown product);
//! - a primary key was taken (the deduction id was seen before): PostgreSQL fails the
//!   statement, undoing its update.
//!
//! The update is the conditional update of [`super::stock`], with the version the same
//! statement read: `... WHERE product_id = $1 AND stock >= $2 AND version = <read>`.

use shared::events::LineItem;
use sqlx::PgConnection;

use super::deductions::NewDeduction;

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

/// Deducts `item` and records the deduction's first outcome (`APPLIED`).
pub async fn deduct(
    conn: &mut PgConnection,
    item: LineItem,
    deduction: &NewDeduction<'_>,
) -> sqlx::Result<Attempt> {
    const STATEMENT: &str = concat!(
        "WITH ",
        deducted_cte!(),
        " INSERT INTO deductions (deduction_id, fingerprint, items, status, rejection_reason, \
               response_status, response_body) \
             SELECT $3, $4, $5, 'APPLIED', NULL, $6, $7 FROM deducted"
    );
    let result = sqlx::query(STATEMENT)
        .bind(item.product_id.0)
        .bind(item.quantity)
        .bind(deduction.deduction_id)
        .bind(deduction.fingerprint)
        .bind(&deduction.items)
        .bind(i16::try_from(deduction.response_status).unwrap_or(500))
        .bind(deduction.response_body)
        .execute(conn)
        .await;
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
