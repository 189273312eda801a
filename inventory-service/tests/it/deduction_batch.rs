//! One batch of `POST /deductions` on its own (`deductions::attempt::apply_once`): every rule of
//! docs/contract.md §3.2 as if the requests came one at a time in order, the stock change and
//! the outcomes written in one transaction, nothing written when anything is off.

use std::time::Duration;

use inventory_service::deductions::DeductionError;
use inventory_service::deductions::attempt::{self, Entry, Verdict};
use inventory_service::deductions::queries::StoredDeduction;
use inventory_service::deductions::request::{
    DeductionId, DeductionRequest, DeductionStatus, Items,
};
use inventory_service::stock::queries::StockRow;
use platform::storage::Conn;
use shared::events::RejectionReason;
use shared::ids::ProductId;
use sqlx::PgPool;
use testkit::{TestDatabase, eventually};

use crate::helpers::database_with_products;

const PRODUCT: i64 = 7;
const OTHER: i64 = 8;

async fn database(products: &[(i64, i64)]) -> TestDatabase {
    database_with_products("deduction_batch", products).await
}

async fn stock_and_version(pool: &PgPool, product: i64) -> (i64, i64) {
    sqlx::query_as("SELECT stock, version FROM products WHERE product_id = $1")
        .bind(product)
        .fetch_one(pool)
        .await
        .expect("the product")
}

/// Rows in `deductions`, and the transactions that wrote them (rows written together share
/// `xmin`).
async fn recorded(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), count(DISTINCT xmin::text) FROM deductions")
        .fetch_one(pool)
        .await
        .expect("counts")
}

/// A request for `quantities` of the batch's products, in ascending product id.
fn request(id: &str, products: &[i64], quantities: &[i64]) -> (DeductionRequest, String) {
    let items = Items::parse(products.iter().copied().zip(quantities.iter().copied()))
        .expect("valid items");
    let fingerprint = items.fingerprint();
    let request = DeductionRequest::sale(DeductionId::parse(id).expect("a valid id"), items);
    (request, fingerprint)
}

fn entries(requests: &[(DeductionRequest, String)]) -> Vec<Entry<'_>> {
    requests
        .iter()
        .map(|(request, fingerprint)| Entry {
            request,
            fingerprint,
        })
        .collect()
}

async fn apply(
    pool: &PgPool,
    requests: &[(DeductionRequest, String)],
) -> Result<Vec<Verdict>, DeductionError> {
    let entries = entries(requests);
    let mut conn = pool.acquire().await.expect("a connection");
    attempt::apply_once(Conn::from(&mut *conn), &entries).await
}

/// The outcome a verdict carries, in short: status, reason and response status, with what
/// its body names (the deduction id when applied, the product when refused).
fn summary(verdict: &Verdict) -> (&'static str, String) {
    let (kind, stored) = match verdict {
        Verdict::First(stored) => ("first", stored),
        Verdict::Same(stored) => ("same", stored),
        Verdict::Stored(stored) => ("stored", stored),
        Verdict::Reused => return ("reused", String::new()),
        Verdict::Cancelled => return ("cancelled", String::new()),
    };
    (kind, describe(stored))
}

fn describe(stored: &StoredDeduction) -> String {
    let body: serde_json::Value =
        serde_json::from_slice(&stored.response_body).expect("a JSON body");
    match (stored.status, stored.rejection_reason) {
        (DeductionStatus::Applied, None) => {
            format!(
                "{} applied {}",
                stored.response_status, body["deduction_id"]
            )
        }
        (DeductionStatus::Rejected, Some(reason)) => {
            let detail = body["detail"].as_str().unwrap_or_default();
            let product = detail.split_whitespace().nth(1).unwrap_or_default();
            format!(
                "{} {} by {product}",
                stored.response_status,
                reason.as_str()
            )
        }
        other => panic!("an inconsistent outcome {other:?}"),
    }
}

fn applied(kind: &'static str, id: &str) -> (&'static str, String) {
    (kind, format!("200 applied \"{id}\""))
}

fn refused(reason: RejectionReason, product: i64) -> (&'static str, String) {
    let status = match reason {
        RejectionReason::InsufficientStock => 409,
        RejectionReason::UnknownProduct => 404,
    };
    (
        "first",
        format!("{status} {} by {product}", reason.as_str()),
    )
}

const SHORT: RejectionReason = RejectionReason::InsufficientStock;

fn summaries(verdicts: &[Verdict]) -> Vec<(&'static str, String)> {
    verdicts.iter().map(summary).collect()
}

#[tokio::test]
async fn each_request_is_judged_against_what_the_earlier_ones_left_in_one_transaction() {
    let db = database(&[(PRODUCT, 5)]).await;
    let p = &[PRODUCT];
    let batch = [
        request("a", p, &[2]),
        request("b", p, &[5]),
        request("c", p, &[2]),
        request("d", p, &[2]),
    ];
    let verdicts = apply(&db.pool, &batch).await.expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![
            applied("first", "a"),
            refused(SHORT, PRODUCT),
            applied("first", "c"),
            refused(SHORT, PRODUCT),
        ],
        "the large one refused does not stop the small one after it"
    );
    assert_eq!(
        stock_and_version(&db.pool, PRODUCT).await,
        (1, 1),
        "one update"
    );
    assert_eq!(recorded(&db.pool).await, (4, 1), "one transaction");
}

#[tokio::test]
async fn an_id_repeated_in_the_batch_gets_the_first_answer_and_deducts_once() {
    let db = database(&[(PRODUCT, 10)]).await;
    let p = &[PRODUCT];
    let batch = [
        request("a", p, &[1]),
        request("a", p, &[1]),
        request("a", p, &[2]),
        request("b", p, &[2]),
    ];
    let verdicts = apply(&db.pool, &batch).await.expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![
            applied("first", "a"),
            applied("same", "a"),
            ("reused", String::new()),
            applied("first", "b"),
        ]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (7, 1));
    assert_eq!(recorded(&db.pool).await.0, 2);
}

#[tokio::test]
async fn a_stored_id_replays_its_first_outcome_even_after_a_restock_and_takes_nothing() {
    let db = database(&[(PRODUCT, 3)]).await;
    let p = &[PRODUCT];
    let first = [request("x", p, &[1]), request("big", p, &[9])];
    apply(&db.pool, &first).await.expect("applied");
    sqlx::query("UPDATE products SET stock = stock + 100, version = version + 1")
        .execute(&db.pool)
        .await
        .expect("a restock");

    let again = [
        request("x", p, &[1]),
        request("x", p, &[2]),
        request("big", p, &[9]),
    ];
    let verdicts = apply(&db.pool, &again).await.expect("replayed");
    let mut refused_again = refused(SHORT, PRODUCT);
    refused_again.0 = "stored";
    assert_eq!(
        summaries(&verdicts),
        vec![
            applied("stored", "x"),
            ("reused", String::new()),
            refused_again
        ]
    );
    assert_eq!(
        stock_and_version(&db.pool, PRODUCT).await,
        (102, 2),
        "replays take nothing"
    );
    assert_eq!(recorded(&db.pool).await, (2, 1), "replays write nothing");
}

#[tokio::test]
async fn a_multi_product_request_takes_all_or_nothing_and_names_the_first_failing_product() {
    let db = database(&[(PRODUCT, 5), (OTHER, 1)]).await;
    let p = &[PRODUCT, OTHER];
    let batch = [
        request("too-much", p, &[1, 9]),
        request("both", p, &[1, 1]),
        request("one-short", p, &[1, 1]),
    ];
    let verdicts = apply(&db.pool, &batch).await.expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![
            refused(SHORT, OTHER),
            applied("first", "both"),
            refused(SHORT, OTHER),
        ]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
    assert_eq!(stock_and_version(&db.pool, OTHER).await, (0, 1));

    const GHOST: i64 = 99;
    let verdicts = apply(&db.pool, &[request("ghost", &[PRODUCT, GHOST], &[1, 1])])
        .await
        .expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![refused(RejectionReason::UnknownProduct, GHOST)]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
}

#[tokio::test]
async fn a_batch_that_mixes_product_sets_is_refused_and_writes_nothing() {
    let db = database(&[(PRODUCT, 5), (OTHER, 5)]).await;
    // The lock a batch holds covers its first request's products, so every other request
    // must name exactly those.
    let batch = [
        request("a", &[PRODUCT], &[1]),
        request("b", &[PRODUCT, OTHER], &[1, 1]),
    ];
    let error = apply(&db.pool, &batch).await.expect_err("refused");
    assert!(matches!(error, DeductionError::Unexpected(_)), "{error:?}");
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (5, 0));
    assert_eq!(recorded(&db.pool).await.0, 0);
}

#[tokio::test]
async fn an_unknown_stored_status_fails_the_call_instead_of_guessing() {
    let db = database(&[(PRODUCT, 3)]).await;
    // The CHECK constraints are what keep other values out; without them, reading fails.
    sqlx::query(
        "ALTER TABLE deductions DROP CONSTRAINT deductions_status_known, \
         DROP CONSTRAINT deductions_rejection_reason_matches",
    )
    .execute(&db.pool)
    .await
    .expect("drop the checks");
    let (odd, fingerprint) = request("odd", &[PRODUCT], &[1]);
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('odd', $1, '[]', 'PARTIAL', 200, '')",
    )
    .bind(&fingerprint)
    .execute(&db.pool)
    .await
    .expect("an odd row");
    let read = apply(&db.pool, &[(odd, fingerprint)]).await;
    assert!(read.is_err(), "{read:?}");
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (3, 0));
}

#[tokio::test]
async fn a_product_that_moved_since_it_was_read_undoes_the_batch_for_a_retry() {
    let db = database(&[(PRODUCT, 5)]).await;
    // Another writer holds the product's row: the batch reads version 0, judges, and its
    // write waits; the other writer then commits version 1.
    let mut other = db.pool.begin().await.expect("a transaction");
    sqlx::query("UPDATE products SET stock = stock + 1, version = version + 1")
        .execute(&mut *other)
        .await
        .expect("the other writer's change");
    let pool = db.pool.clone();
    let call = tokio::spawn(async move { apply(&pool, &[request("a", &[PRODUCT], &[1])]).await });
    wait_for_a_lock_wait(&db.pool).await;
    other.commit().await.expect("the other writer commits");

    let error = call.await.expect("the call ends").expect_err("undone");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (6, 1));
    assert_eq!(
        recorded(&db.pool).await.0,
        0,
        "nothing of the batch was kept"
    );
}

#[tokio::test]
async fn an_id_recorded_meanwhile_by_another_writer_undoes_the_batch_for_a_retry() {
    let db = database(&[(PRODUCT, 5)]).await;
    // Another writer has inserted "x" and not committed: the batch reads no stored "x",
    // judges it first, and its insert waits for that writer.
    let (x, x_fingerprint) = request("x", &[PRODUCT], &[1]);
    let mut other = db.pool.begin().await.expect("a transaction");
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('x', $1, '[]', 'APPLIED', 200, '{\"deduction_id\":\"x\"}')",
    )
    .bind(&x_fingerprint)
    .execute(&mut *other)
    .await
    .expect("the other writer's row");
    let pool = db.pool.clone();
    let batch = [request("y", &[PRODUCT], &[1]), (x, x_fingerprint)];
    let retry = batch.clone();
    let call = tokio::spawn(async move { apply(&pool, &batch).await });
    wait_for_a_lock_wait(&db.pool).await;
    other.commit().await.expect("the other writer commits");

    let error = call.await.expect("the call ends").expect_err("undone");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(
        stock_and_version(&db.pool, PRODUCT).await,
        (5, 0),
        "nothing of the batch was kept"
    );
    assert_eq!(recorded(&db.pool).await.0, 1);

    let verdicts = apply(&db.pool, &retry).await.expect("applied on the retry");
    assert_eq!(
        summaries(&verdicts),
        vec![applied("first", "y"), applied("stored", "x")]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
}

/// Waits until the batch's write waits on a lock another transaction holds.
/// Waits until the batch's write (`record`, whose text begins so; `pg_stat_activity` keeps only
/// its first kilobyte) waits for a lock.
async fn wait_for_a_lock_wait(pool: &PgPool) {
    eventually(Duration::from_secs(30), || {
        let pool = pool.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE 'WITH ordered AS MATERIALIZED%'",
            )
            .fetch_one(&pool)
            .await
            .expect("a count");
            (waiting == 1).then_some(())
        }
    })
    .await;
}

fn sqlstate(error: &DeductionError) -> Option<String> {
    match error {
        DeductionError::Database(error) => error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned()),
        _ => None,
    }
}

/// A batch judged against the stock the previous batch left, without reading it.
async fn apply_remembered(
    pool: &PgPool,
    requests: &[(DeductionRequest, String)],
    remembered: &[(i64, i64, i64)],
) -> Result<attempt::Attempted, DeductionError> {
    let entries = entries(requests);
    let rows = remembered
        .iter()
        .map(|&(id, stock, version)| (ProductId(id), StockRow { stock, version }))
        .collect();
    let products: Vec<ProductId> = requests
        .first()
        .map(|(request, _)| request.items.product_ids())
        .unwrap_or_default();
    let mut conn = pool.acquire().await.expect("a connection");
    attempt::apply_on(Conn::from(&mut *conn), &products, &entries, &[], Some(rows)).await
}

#[tokio::test]
async fn a_batch_judged_against_the_remembered_stock_writes_and_remembers_what_it_left() {
    let db = database(&[(PRODUCT, 5)]).await;
    let p = &[PRODUCT];
    let first = apply_remembered(&db.pool, &[request("a", p, &[2])], &[(PRODUCT, 5, 0)])
        .await
        .expect("applied");
    assert_eq!(summaries(&first.verdicts), vec![applied("first", "a")]);
    let left = first.left.expect("every product known");
    assert_eq!(
        left,
        vec![(
            ProductId(PRODUCT),
            StockRow {
                stock: 3,
                version: 1
            }
        )]
    );
    let remembered: Vec<(i64, i64, i64)> = left
        .iter()
        .map(|(id, row)| (id.0, row.stock, row.version))
        .collect();
    let second = apply_remembered(
        &db.pool,
        &[request("b", p, &[3]), request("c", p, &[1])],
        &remembered,
    )
    .await
    .expect("applied");
    assert_eq!(
        summaries(&second.verdicts),
        vec![applied("first", "b"), refused(SHORT, PRODUCT)]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (0, 2));
    assert_eq!(recorded(&db.pool).await, (3, 2));
}

#[tokio::test]
async fn a_remembered_stock_that_moved_writes_nothing_not_even_a_refusal() {
    let db = database(&[(PRODUCT, 0)]).await;
    // Remembered empty at version 0; a restock has since added 10 (version 1). Judged against
    // the memory, "a" would be refused: the write must not record that refusal.
    sqlx::query("UPDATE products SET stock = 10, version = 1")
        .execute(&db.pool)
        .await
        .expect("a restock");
    let error = apply_remembered(
        &db.pool,
        &[request("a", &[PRODUCT], &[1])],
        &[(PRODUCT, 0, 0)],
    )
    .await
    .expect_err("stale");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(recorded(&db.pool).await.0, 0);
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (10, 1));
}

#[tokio::test]
async fn a_stored_id_in_a_remembered_batch_writes_nothing_and_the_read_replays_it() {
    let db = database(&[(PRODUCT, 5)]).await;
    let x = request("x", &[PRODUCT], &[1]);
    apply(&db.pool, std::slice::from_ref(&x))
        .await
        .expect("applied");
    let batch = [request("y", &[PRODUCT], &[1]), x];
    let error = apply_remembered(&db.pool, &batch, &[(PRODUCT, 4, 1)])
        .await
        .expect_err("the memory knows no stored ids");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));

    let verdicts = apply(&db.pool, &batch).await.expect("read and applied");
    assert_eq!(
        summaries(&verdicts),
        vec![applied("first", "y"), applied("stored", "x")]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (3, 2));
}
