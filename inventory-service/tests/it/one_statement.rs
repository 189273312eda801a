//! The one-statement deduction either does the whole job or writes nothing at all, whatever
//! stops it: a short stock, a taken id. (Reservations have no one-statement path any more:
//! `batch.rs` tests the batch path that replaced it.)

use inventory_service::db::deductions::NewDeduction;
use inventory_service::db::one_statement::{self, Attempt};
use platform::testing::TestDatabase;
use shared::events::LineItem;
use shared::ids::ProductId;
use sqlx::PgPool;

const PRODUCT: i64 = 7;

async fn database_with_stock(stock: i64) -> TestDatabase {
    let db = TestDatabase::create("one_statement", &inventory_service::MIGRATOR).await;
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES ($1, 'widget', $2)")
        .bind(PRODUCT)
        .bind(stock)
        .execute(&db.pool)
        .await
        .expect("a product");
    db
}

fn item(quantity: i64) -> LineItem {
    LineItem {
        product_id: ProductId(PRODUCT),
        quantity,
    }
}

async fn stock_and_version(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT stock, version FROM products WHERE product_id = $1")
        .bind(PRODUCT)
        .fetch_one(pool)
        .await
        .expect("the product")
}

async fn count(pool: &PgPool, table: &'static str) -> i64 {
    // The table names are this file's own constants.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("a count")
}

fn deduction(id: &str) -> NewDeduction<'_> {
    NewDeduction {
        deduction_id: id,
        fingerprint: "f",
        items: serde_json::json!([{"product_id": PRODUCT, "quantity": 2}]),
        status: "APPLIED",
        rejection_reason: None,
        response_status: 200,
        response_body: b"{}",
    }
}

#[tokio::test]
async fn a_deduction_commits_with_its_outcome_and_a_taken_id_undoes_the_update() {
    let db = database_with_stock(5).await;
    let mut conn = db.pool.acquire().await.expect("a connection");

    let first = one_statement::deduct(&mut conn, item(2), &deduction("d-1")).await;
    assert_eq!(first.expect("runs"), Attempt::Done);
    assert_eq!(stock_and_version(&db.pool).await, (3, 1));
    assert_eq!(count(&db.pool, "deductions").await, 1);

    let again = one_statement::deduct(&mut conn, item(2), &deduction("d-1")).await;
    assert_eq!(again.expect("runs"), Attempt::NotTaken);
    assert_eq!(
        stock_and_version(&db.pool).await,
        (3, 1),
        "the id was taken, so the update of the same statement was undone"
    );
}

#[tokio::test]
async fn a_deduction_the_stock_cannot_cover_writes_nothing() {
    let db = database_with_stock(1).await;
    let mut conn = db.pool.acquire().await.expect("a connection");
    let short = one_statement::deduct(&mut conn, item(2), &deduction("d-2")).await;
    assert_eq!(short.expect("runs"), Attempt::NotTaken);
    assert_eq!(stock_and_version(&db.pool).await, (1, 0));
    assert_eq!(count(&db.pool, "deductions").await, 0);
}
