//! Many deductions at once, with and without Redis, and a lock holder stalled past its TTL:
//! stock is never oversold.

use std::time::Duration;

use inventory_service::products::product::NewProduct;
use inventory_service::stock::lock::{LockError, LockOptions};
use inventory_service::{products, reservations, stock};
use platform::storage::Conn;
use shared::ids::ProductId;

use crate::helpers::{TestApp, assert_exactly_fifty_applied, patient, stampede};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_deductions_on_a_stock_of_fifty_apply_exactly_fifty() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 50).await;
    let statuses = stampede(&app, 1, 200).await;
    assert_exactly_fifty_applied(&app, 1, &statuses).await;
    // Rows written by one transaction share its id: requests that arrived while a batch ran
    // were written together by the next one.
    let commits: i64 = sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deductions")
        .fetch_one(app.db())
        .await
        .expect("a count");
    assert!(commits < 200, "{commits} commits for 200 deductions");
    assert_eq!(app.deductions.stats().waiting, 0);
}

/// The row of `product` as a writer that does not lock it reads it before deciding.
async fn stock_of(conn: &mut sqlx::PgConnection, product: ProductId) -> stock::queries::StockRow {
    let (stock, version): (i64, i64) =
        sqlx::query_as("SELECT stock, version FROM products WHERE product_id = $1")
            .bind(product.0)
            .fetch_one(conn)
            .await
            .expect("read");
    stock::queries::StockRow { stock, version }
}

/// A consumer batch's write of one unit less, conditional on the version `read` saw.
async fn deduct_one(
    conn: &mut sqlx::PgConnection,
    product: ProductId,
    read: stock::queries::StockRow,
) -> sqlx::Result<()> {
    let write = reservations::queries::BatchWrite {
        judged: vec![(product, read)],
        changes: vec![stock::queries::Change {
            product_id: product,
            delta: -1,
            version: Some(read.version),
        }],
        ..Default::default()
    };
    reservations::queries::write_batch(Conn::from(conn), &write).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stalled_past_its_lock_ttl_cannot_oversell() {
    let app = TestApp::spawn().await;
    let product = ProductId(1);
    products::queries::insert(
        Conn::from(&mut *app.db().acquire().await.expect("a connection")),
        &NewProduct::parse(1, "Last unit", 1).expect("valid"),
    )
    .await
    .expect("insert");
    // Renewal off: this holder behaves like a process paused (SIGSTOP) with its watchdog.
    let stalling = app.locker(LockOptions {
        ttl: Duration::from_millis(300),
        wait: Duration::from_secs(10),
        renew: false,
    });

    // A locks the product and reads stock 1 at some version...
    let a_locks = stalling.acquire(product).await.expect("A's lock");
    let mut a_tx = app.db().begin().await.expect("A's transaction");
    let stale = stock_of(&mut a_tx, product).await;
    assert_eq!(stale.stock, 1);

    // ...and stalls until its lock expires; B, in another process, takes the lock and sells
    // the last unit.
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_millis(300),
        wait: Duration::from_secs(10),
        renew: true,
    });
    let b_locks = other_process
        .acquire(product)
        .await
        .expect("B's lock, once A's expired");
    let mut b_conn = app.db().acquire().await.expect("B's connection");
    let fresh = stock_of(&mut b_conn, product).await;
    assert_eq!(b_locks.ensure_held(), Ok(()));
    deduct_one(&mut b_conn, product, fresh)
        .await
        .expect("B's read is current, so its write applies");
    b_locks.release().await;

    // A wakes up with its stale read: it is told it lost the lock, and even a write it sent
    // anyway changes nothing...
    assert_eq!(a_locks.ensure_held(), Err(LockError::Lost));
    let refused = deduct_one(&mut a_tx, product, stale)
        .await
        .expect_err("the stale write must match no row");
    assert!(
        platform::messaging::consumer::is_database_contention(&refused),
        "{refused}"
    );
    a_tx.rollback().await.expect("A rolls back");
    a_locks.release().await;

    assert_eq!(app.stock(1).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_with_one_deduction_id_deduct_once() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 100).await;
    let tasks: Vec<_> = (0..20)
        .map(|_| app.deduct_in_task("same-id", &[(1, 3)]))
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("the request task finishes"));
    }
    assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
    assert!(
        answers.windows(2).all(|w| w[0].body == w[1].body),
        "every answer is the same bytes"
    );
    assert_eq!(app.stock(1).await, 97);
    assert_eq!(app.deduction_rows().await, 1);
}

/// Restocks landing while a leader streams batches: a leader judges its next batch against the
/// stock its last one left, so each restock makes that memory stale. Every unit restocked is
/// sold once the last wave has gone through, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restocks_between_batches_are_sold_and_never_oversold() {
    let app = TestApp::spawn_with(patient).await;
    app.create_product(1, 50).await;
    let during: Vec<_> = (0..150)
        .map(|i| app.deduct_in_task(&format!("during-{i}"), &[(1, 1)]))
        .collect();
    for i in 0..10 {
        let key = format!("restock-{i}");
        assert_eq!(app.restock(1, 5, Some(&key)).await.status(), 200);
    }
    let after: Vec<_> = (0..120)
        .map(|i| app.deduct_in_task(&format!("after-{i}"), &[(1, 1)]))
        .collect();
    let mut applied = 0;
    for task in during.into_iter().chain(after) {
        let answer = task.await.expect("the request task finishes");
        assert!(matches!(answer.status, 200 | 409), "{answer:?}");
        applied += usize::from(answer.status == 200);
    }
    assert_eq!(applied, 100, "the 50 units stocked and the 50 restocked");
    assert_eq!(app.stock(1).await, 0);
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deductions WHERE status = 'APPLIED'")
            .fetch_one(app.db())
            .await
            .expect("count");
    assert_eq!(recorded, 100);
}
