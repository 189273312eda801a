//! The `products` table: create, read, list, restock. A product's `held` is the sum of its
//! rows in `held_units` (the units of its `HELD` holds; PostgreSQL's `held_of`), read with it
//! from `held_units_product_idx` alone. The MySQL forms of
//! `inventory_service::products::queries`.

use chrono::{DateTime, Utc};
use sqlx::MySqlConnection;

use crate::is_duplicate;

/// A product as the service shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductRow {
    pub product_id: i64,
    pub name: String,
    pub stock: i64,
    pub held: i64,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

/// Creates the product; `None` when a product with that id exists already (PostgreSQL's
/// `ON CONFLICT ON CONSTRAINT products_pkey DO NOTHING`: a duplicate of the primary key is
/// that answer; a CHECK refused stays an error, see [`crate::violated_check`]). Run it inside
/// a transaction: the row is read back after the insert, and the insert's lock keeps it as
/// inserted until the commit. PostgreSQL: `products::queries::insert`.
pub async fn insert(
    conn: &mut MySqlConnection,
    product_id: i64,
    name: &str,
    stock: i64,
) -> sqlx::Result<Option<ProductRow>> {
    let inserted = sqlx::query!(
        "INSERT INTO products (product_id, name, stock) VALUES (?, ?, ?)",
        product_id,
        name,
        stock,
    )
    .execute(&mut *conn)
    .await;
    match inserted {
        Ok(_) => find(conn, product_id).await,
        Err(error) if is_duplicate(&error, "PRIMARY") => Ok(None),
        Err(error) => Err(error),
    }
}

/// The product `product_id`, with its `held`. PostgreSQL: `products::queries::find`.
pub async fn find(conn: &mut MySqlConnection, product_id: i64) -> sqlx::Result<Option<ProductRow>> {
    // SUM of a BIGINT is a DECIMAL on MySQL: cast back to BIGINT.
    sqlx::query_as!(
        ProductRow,
        "SELECT p.product_id, p.name, p.stock,
                CAST((SELECT COALESCE(SUM(u.quantity), 0) FROM held_units AS u
                      WHERE u.product_id = p.product_id) AS SIGNED) AS `held!: i64`,
                p.version, p.updated_at AS `updated_at: DateTime<Utc>`
         FROM products AS p WHERE p.product_id = ?",
        product_id,
    )
    .fetch_optional(conn)
    .await
}

/// Up to `limit` products with an id above `after`, in ascending product id. PostgreSQL:
/// `products::queries::list`.
pub async fn list(
    conn: &mut MySqlConnection,
    after: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<ProductRow>> {
    sqlx::query_as!(
        ProductRow,
        "SELECT p.product_id, p.name, p.stock,
                CAST((SELECT COALESCE(SUM(u.quantity), 0) FROM held_units AS u
                      WHERE u.product_id = p.product_id) AS SIGNED) AS `held!: i64`,
                p.version, p.updated_at AS `updated_at: DateTime<Utc>`
         FROM products AS p
         WHERE p.product_id > ? ORDER BY p.product_id LIMIT ?",
        after.unwrap_or(0),
        limit,
    )
    .fetch_all(conn)
    .await
}

/// Adds `quantity` to the product's stock (version + 1); `None` when there is no such
/// product. A plain increment needs no lock first: it cannot oversell, and the version bump
/// makes any deduction that read the row before it read again. Run it inside a transaction:
/// the row is read back after the update, under the update's lock. PostgreSQL:
/// `products::queries::add_stock`.
///
/// The update's count is the rows matched, and the version bump changes every row matched,
/// so 0 is exactly "no such product".
pub async fn add_stock(
    conn: &mut MySqlConnection,
    product_id: i64,
    quantity: i64,
) -> sqlx::Result<Option<ProductRow>> {
    let done = sqlx::query!(
        "UPDATE products SET stock = stock + ?, version = version + 1,
                updated_at = UTC_TIMESTAMP(6)
         WHERE product_id = ?",
        quantity,
        product_id,
    )
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    find(conn, product_id).await
}
