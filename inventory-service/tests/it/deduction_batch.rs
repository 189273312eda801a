//! The batch statement of `POST /deductions` on its own: it reports exactly what it could
//! write, so the caller commits a whole batch or nothing (a moved version, a short stock or a
//! taken id leave the rollback to it).

use inventory_service::db::deductions::{self, BatchWrite, NewDeduction, StockChange};
use inventory_service::domain::deduction::DeductionStatus;
use platform::testing::TestDatabase;
use shared::ids::ProductId;
use sqlx::PgPool;

const PRODUCT: i64 = 7;

async fn database_with_stock(stock: i64) -> TestDatabase {
    let db = TestDatabase::create("deduction_batch", &inventory_service::MIGRATOR).await;
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES ($1, 'widget', $2)")
        .bind(PRODUCT)
        .bind(stock)
        .execute(&db.pool)
        .await
        .expect("a product");
    db
}

async fn stock_and_version(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT stock, version FROM products WHERE product_id = $1")
        .bind(PRODUCT)
        .fetch_one(pool)
        .await
        .expect("the product")
}

async fn deduction_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM deductions")
        .fetch_one(pool)
        .await
        .expect("a count")
}

fn recorded(id: &str, status: DeductionStatus) -> NewDeduction<'_> {
    let (reason, response_status) = match status {
        DeductionStatus::Applied => (None, 200),
        DeductionStatus::Rejected => (Some("insufficient_stock"), 409),
    };
    NewDeduction {
        deduction_id: id,
        fingerprint: "f",
        items: serde_json::json!([{"product_id": PRODUCT, "quantity": 2}]),
        status,
        rejection_reason: reason,
        response_status,
        response_body: b"{}",
    }
}

fn change(quantity: i64, version: i64) -> StockChange {
    StockChange {
        product: ProductId(PRODUCT),
        quantity,
        version,
    }
}

/// Writes in a transaction and commits only when everything was written, as the batch does.
async fn write(pool: &PgPool, changes: &[StockChange], rows: &[NewDeduction<'_>]) -> BatchWrite {
    let mut tx = pool.begin().await.expect("a transaction");
    let written = deductions::write_batch(&mut tx, changes, rows)
        .await
        .expect("the statement runs");
    let full = written.changed == changes.len() as i64 && written.recorded == rows.len() as i64;
    if full {
        tx.commit().await.expect("commit");
    } else {
        tx.rollback().await.expect("rollback");
    }
    written
}

#[tokio::test]
async fn a_batch_writes_its_outcomes_and_one_stock_change_in_one_statement() {
    let db = database_with_stock(5).await;
    let rows = [
        recorded("a", DeductionStatus::Applied),
        recorded("b", DeductionStatus::Rejected),
        recorded("c", DeductionStatus::Applied),
    ];
    let written = write(&db.pool, &[change(4, 0)], &rows).await;
    assert_eq!(
        written,
        BatchWrite {
            changed: 1,
            recorded: 3
        }
    );
    assert_eq!(stock_and_version(&db.pool).await, (1, 1), "one update");
    let found = deductions::find_many(&mut db.pool.acquire().await.expect("conn"), &["b", "x"])
        .await
        .expect("a read");
    assert_eq!(found.len(), 1);
    assert_eq!(found["b"].status, DeductionStatus::Rejected);
}

#[tokio::test]
async fn a_taken_id_is_reported_and_the_whole_batch_is_undone() {
    let db = database_with_stock(5).await;
    let first = write(
        &db.pool,
        &[change(2, 0)],
        &[recorded("d-1", DeductionStatus::Applied)],
    )
    .await;
    assert_eq!(
        first,
        BatchWrite {
            changed: 1,
            recorded: 1
        }
    );

    let rows = [
        recorded("d-2", DeductionStatus::Applied),
        recorded("d-1", DeductionStatus::Applied),
    ];
    let again = write(&db.pool, &[change(2, 1)], &rows).await;
    assert_eq!(
        again,
        BatchWrite {
            changed: 1,
            recorded: 1
        }
    );
    assert_eq!(
        stock_and_version(&db.pool).await,
        (3, 1),
        "the id was taken, so the batch was rolled back with its update"
    );
    assert_eq!(deduction_rows(&db.pool).await, 1);
}

#[tokio::test]
async fn a_moved_version_or_a_short_stock_changes_no_row() {
    let db = database_with_stock(3).await;
    let stale = write(
        &db.pool,
        &[change(1, 9)],
        &[recorded("old", DeductionStatus::Applied)],
    )
    .await;
    assert_eq!(stale.changed, 0, "the version moved since the read");
    let short = write(
        &db.pool,
        &[change(4, 0)],
        &[recorded("big", DeductionStatus::Applied)],
    )
    .await;
    assert_eq!(short.changed, 0, "the stock cannot cover it");
    assert_eq!(stock_and_version(&db.pool).await, (3, 0));
    assert_eq!(deduction_rows(&db.pool).await, 0, "nothing recorded");
}

#[tokio::test]
async fn an_unknown_stored_status_fails_the_read_instead_of_guessing() {
    let db = database_with_stock(3).await;
    // The CHECK constraint is what keeps other values out; without it, the read must fail.
    sqlx::query("ALTER TABLE deductions DROP CONSTRAINT deductions_status_known")
        .execute(&db.pool)
        .await
        .expect("drop the check");
    sqlx::query("ALTER TABLE deductions DROP CONSTRAINT deductions_rejection_reason_matches")
        .execute(&db.pool)
        .await
        .expect("drop the check");
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('odd', 'f', '[]', 'PARTIAL', 200, '')",
    )
    .execute(&db.pool)
    .await
    .expect("an odd row");
    let read = deductions::find_many(&mut db.pool.acquire().await.expect("conn"), &["odd"]).await;
    assert!(read.is_err(), "{read:?}");
}
