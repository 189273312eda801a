//! Many deductions at once, with and without a shared Redis, and a lock holder stalled past
//! its TTL: stock is never oversold, on either backend.

use std::time::Duration;

use inventory_service::reservations;
use inventory_service::stock::lock::{LockError, LockOptions, Locker};
use inventory_service::stock::queries::{Change, StockRow};
use platform::storage::Conn;
use reqwest::StatusCode;
use shared::ids::ProductId;
use testkit::Backend;

use crate::helpers::{
    TestApp, assert_exactly_fifty_applied, assert_replayed, deduction_body, patient, stampede,
};

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    two_hundred_concurrent_deductions_on_a_stock_of_fifty_apply_exactly_fifty,
    restocks_between_batches_are_sold_and_never_oversold,
    two_instances_without_a_shared_lock_never_oversell,
);

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_holder_stalled_past_its_lock_ttl_cannot_oversell,
    concurrent_first_requests_with_one_deduction_id_deduct_once,
);

async fn two_hundred_concurrent_deductions_on_a_stock_of_fifty_apply_exactly_fifty(
    backend: Backend,
) {
    let app = TestApp::spawn_on(backend, patient).await;
    app.create_product(1, 50).await;
    let statuses = stampede(&app, 1, 200).await;
    assert_exactly_fifty_applied(&app, 1, &statuses).await;
    assert_eq!(app.deductions.stats().waiting, 0);
    // Rows written by one transaction share its id on PostgreSQL (`xmin`; MySQL shows its
    // rows' transaction to no statement): requests that arrived while a batch ran were
    // written together by the next one.
    if backend == Backend::Postgres {
        let commits: i64 = sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deductions")
            .fetch_one(app.db())
            .await
            .expect("a count");
        assert!(commits < 200, "{commits} commits for 200 deductions");
    }
}

/// The row of `product` as a writer that does not lock it reads it before deciding.
async fn stock_of(conn: Conn<'_>, product: ProductId) -> StockRow {
    let sql = format!(
        "SELECT stock, version FROM products WHERE product_id = {}",
        product.0
    );
    let (stock, version): (i64, i64) = match conn {
        Conn::Postgres(conn) => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(conn)
                .await
        }
        Conn::MySql(conn) => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(conn)
                .await
        }
    }
    .expect("read");
    StockRow { stock, version }
}

/// A consumer batch's write of one unit less, conditional on the version `read` saw.
async fn deduct_one(conn: Conn<'_>, product: ProductId, read: StockRow) -> sqlx::Result<()> {
    let write = reservations::queries::BatchWrite {
        judged: vec![(product, read)],
        changes: vec![Change {
            product_id: product,
            delta: -1,
            version: Some(read.version),
        }],
        ..Default::default()
    };
    reservations::queries::write_batch(conn, &write).await
}

async fn a_holder_stalled_past_its_lock_ttl_cannot_oversell(backend: Backend) {
    let app = TestApp::spawn_on(backend, |_| {}).await;
    // Renewal off: this holder behaves like a process paused (SIGSTOP) with its watchdog.
    let stalling = app.locker(LockOptions {
        ttl: Duration::from_millis(300),
        wait: Duration::from_secs(10),
        renew: false,
    });
    let other_process = app.locker(LockOptions {
        ttl: Duration::from_millis(300),
        wait: Duration::from_secs(10),
        renew: true,
    });
    a_stalled_holder_cannot_oversell(&app, &stalling, &other_process).await;
}

/// `stalling` (renewal off) locks a product of stock 1 and reads it, then stalls until its lock
/// expires; `other_process` takes the lock and sells the unit. The stalled holder learns before
/// commit that its lock is gone, and a write it sends anyway matches no row.
pub(crate) async fn a_stalled_holder_cannot_oversell(
    app: &TestApp,
    stalling: &Locker,
    other_process: &Locker,
) {
    let db = app.database.database();
    let product = ProductId(1);
    app.create_product(1, 1).await;

    // A locks the product and reads stock 1 at some version...
    let a_locks = stalling.acquire(product).await.expect("A's lock");
    let mut a_tx = db.begin().await.expect("A's transaction");
    let stale = stock_of(a_tx.conn(), product).await;
    assert_eq!(stale.stock, 1);

    // ...and stalls until its lock expires; B, in another process, takes the lock and sells
    // the last unit.
    let b_locks = other_process
        .acquire(product)
        .await
        .expect("B's lock, once A's expired");
    let mut b_conn = db.acquire().await.expect("B's connection");
    let fresh = stock_of(b_conn.conn(), product).await;
    assert_eq!(b_locks.ensure_held(), Ok(()));
    deduct_one(b_conn.conn(), product, fresh)
        .await
        .expect("B's read is current, so its write applies");
    b_locks.release().await;

    // A wakes up with its stale read: it is told it lost the lock, and even a write it sent
    // anyway changes nothing...
    assert_eq!(a_locks.ensure_held(), Err(LockError::Lost));
    let refused = deduct_one(a_tx.conn(), product, stale)
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

async fn concurrent_first_requests_with_one_deduction_id_deduct_once(backend: Backend) {
    let app = TestApp::spawn_on(backend, patient).await;
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
async fn restocks_between_batches_are_sold_and_never_oversold(backend: Backend) {
    let app = TestApp::spawn_on(backend, patient).await;
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
    assert_eq!(applied_rows(&app).await, 100);
}

/// The deductions recorded as applied.
async fn applied_rows(app: &TestApp) -> i64 {
    app.database
        .count("SELECT count(*) FROM deductions WHERE status = 'APPLIED'")
        .await
}

/// Two instances with Redis keys of their own, so their batches never wait for each other:
/// only the database (versions, `stock >= 0`) stands between them and overselling.
async fn two_instances_without_a_shared_lock_never_oversell(backend: Backend) {
    let patient = |c: &mut inventory_service::Config| c.lock_wait = Duration::from_secs(30);
    let (first, second) = TestApp::two_on_one_database(backend, patient).await;
    first.create_product(1, 10).await;
    let ids: Vec<String> = (0..30).map(|i| format!("two-{i}")).collect();
    let statuses = stampede_over(&[&first, &second], 1, &ids).await;
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (10, 20), "statuses: {statuses:?}");
    assert_eq!(second.stock(1).await, 0);
    assert_eq!(applied_rows(&first).await, 10);
    // Every id was decided once: its replay, from either instance, answers the same.
    for (i, id) in ids.iter().enumerate() {
        let app = if i % 2 == 0 { &second } else { &first };
        let again = app.deduct(id, &[(1, 1)]).await;
        assert_eq!(again.status().as_u16(), statuses[i], "{id}");
        assert_replayed(&again);
    }
}

/// Sends one-unit deductions `ids` of `product` at once, spread over `apps`; a 503 `busy`
/// (races lost past the retry budget) is sent again with the same id, as a client does.
pub(crate) async fn stampede_over(apps: &[&TestApp], product: i64, ids: &[String]) -> Vec<u16> {
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let app = apps[i % apps.len()];
            let request = app
                .admin
                .post(app.url("/deductions"))
                .json(&deduction_body(id, &[(product, 1)]));
            tokio::spawn(async move {
                // Bounded: a service that answers `busy` for ever fails the test, not hangs it.
                for _ in 0..200 {
                    let attempt = request.try_clone().expect("a JSON request clones");
                    let status = attempt.send().await.expect("POST /deductions").status();
                    if status != StatusCode::SERVICE_UNAVAILABLE {
                        return status.as_u16();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                panic!("still busy after 200 tries");
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("the request task finishes"));
    }
    statuses
}

/// Sixty deductions of one unit of product 1 (stock 20), sent alternately to `first` and
/// `second` and each retried while it answers 503 (busy), with `fault` done once the first
/// thirty are on their way: exactly twenty apply and forty are refused, whatever the fault did
/// to the lock service. Product 1 must exist with stock 20.
pub(crate) async fn sixty_deductions_across_a_fault(
    first: &TestApp,
    second: &TestApp,
    fault: impl std::future::Future<Output = ()>,
) {
    let send = |i: usize| {
        let app = if i.is_multiple_of(2) { first } else { second };
        let request = app
            .admin
            .post(app.url("/deductions"))
            .json(&deduction_body(&format!("across-a-fault-{i}"), &[(1, 1)]));
        tokio::spawn(async move {
            for _ in 0..200 {
                let attempt = request.try_clone().expect("a JSON request clones");
                let status = attempt.send().await.expect("POST /deductions").status();
                if status != 503 {
                    return status.as_u16();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("still busy after 200 tries");
        })
    };
    let early: Vec<_> = (0..30).map(send).collect();
    fault.await;
    let late: Vec<_> = (30..60).map(send).collect();
    // A lock left behind for good would keep every deduction busy until its retries ran out
    // (200 × the request timeout): fail well before that.
    let statuses = tokio::time::timeout(Duration::from_secs(120), async {
        let mut statuses = Vec::new();
        for task in early.into_iter().chain(late) {
            statuses.push(task.await.expect("a deduction"));
        }
        statuses
    })
    .await
    .expect("sixty deductions answered within 120 s");
    let applied = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 409).count();
    assert_eq!((applied, refused), (20, 40), "{statuses:?}");
    assert_eq!(first.stock(1).await, 0);
}
