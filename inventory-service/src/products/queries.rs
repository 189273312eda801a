//! The `products` table: create, read, list, restock. A product's `held` is the sum of its
//! rows in `held_units` (the units of its `HELD` holds: the function `held_of`), read with it. Every statement is
//! checked against the migrations at build time (`sqlx::query!`, offline data in `.sqlx/`);
//! on MySQL, the statements of `inventory_mysql::products` (each function holds both, one
//! `match` on the connection at its top).

use chrono::{DateTime, Utc};
use platform::storage::Conn;
use shared::ids::ProductId;
use sqlx::Acquire;

use super::product::{NewProduct, Product, RestockQuantity};

#[derive(Debug, Clone)]
pub struct ProductRow {
    pub product_id: i64,
    pub name: String,
    pub stock: i64,
    pub held: i64,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

impl From<ProductRow> for Product {
    fn from(row: ProductRow) -> Self {
        Self {
            product_id: ProductId(row.product_id),
            name: row.name,
            stock: row.stock,
            held: row.held,
            version: row.version,
            updated_at: row.updated_at,
        }
    }
}

impl From<inventory_mysql::products::ProductRow> for Product {
    fn from(row: inventory_mysql::products::ProductRow) -> Self {
        Self {
            product_id: ProductId(row.product_id),
            name: row.name,
            stock: row.stock,
            held: row.held,
            version: row.version,
            updated_at: row.updated_at,
        }
    }
}

/// Creates the product; `None` when a product with that id exists already (on MySQL, the
/// duplicate of its primary key, `PRIMARY` there, is that answer).
pub async fn insert(conn: Conn<'_>, product: &NewProduct) -> sqlx::Result<Option<Product>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            // The row is read back after the insert: the transaction keeps it as inserted.
            let mut tx = conn.begin().await?;
            let row = inventory_mysql::products::insert(
                &mut tx,
                product.product_id.0,
                &product.name,
                product.stock,
            )
            .await?;
            tx.commit().await?;
            return Ok(row.map(Product::from));
        }
    };
    let row = sqlx::query_as!(
        ProductRow,
        r#"INSERT INTO products (product_id, name, stock) VALUES ($1, $2, $3)
         ON CONFLICT ON CONSTRAINT products_pkey DO NOTHING
         RETURNING product_id, name, stock, 0::bigint AS "held!", version, updated_at"#,
        product.product_id.0,
        product.name,
        product.stock,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Product::from))
}

pub async fn find(conn: Conn<'_>, product: ProductId) -> sqlx::Result<Option<Product>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let row = inventory_mysql::products::find(conn, product.0).await?;
            return Ok(row.map(Product::from));
        }
    };
    let row = sqlx::query_as!(
        ProductRow,
        r#"SELECT product_id, name, stock, version, updated_at,
                  held_of(p.product_id) AS "held!"
             FROM products AS p WHERE product_id = $1"#,
        product.0,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Product::from))
}

/// Up to `limit` products with an id above `after`, in ascending product id.
pub async fn list(
    conn: Conn<'_>,
    after: Option<ProductId>,
    limit: i64,
) -> sqlx::Result<Vec<Product>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows = inventory_mysql::products::list(conn, after.map(|p| p.0), limit).await?;
            return Ok(rows.into_iter().map(Product::from).collect());
        }
    };
    let rows = sqlx::query_as!(
        ProductRow,
        r#"SELECT product_id, name, stock, version, updated_at,
                  held_of(p.product_id) AS "held!"
             FROM products AS p
            WHERE product_id > $1 ORDER BY product_id LIMIT $2"#,
        after.map_or(0, |p| p.0),
        limit,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Product::from).collect())
}

/// Adds `quantity` to the product's stock; `None` when there is no such product.
///
/// A plain increment needs no lock: it cannot oversell, and the version bump makes any
/// deduction that read the row before it re-read and retry.
pub async fn add_stock(
    conn: Conn<'_>,
    product: ProductId,
    quantity: RestockQuantity,
) -> sqlx::Result<Option<Product>> {
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            // The row is read back after the update, under its lock: inside the caller's
            // transaction when there is one (a savepoint then), else one of its own.
            let mut tx = conn.begin().await?;
            let row =
                inventory_mysql::products::add_stock(&mut tx, product.0, quantity.get()).await?;
            tx.commit().await?;
            return Ok(row.map(Product::from));
        }
    };
    let row = sqlx::query_as!(
        ProductRow,
        r#"UPDATE products AS p SET stock = stock + $2, version = version + 1, updated_at = now()
            WHERE product_id = $1
           RETURNING product_id, name, stock, version, updated_at,
                     held_of(p.product_id) AS "held!""#,
        product.0,
        quantity.get(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Product::from))
}
