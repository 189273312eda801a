//! One batch of `POST /deductions` on its own (`deductions::attempt::apply_once`), on either
//! backend: every rule of docs/contract.md §3.2 as if the requests came one at a time in
//! order, the stock change and the outcomes written in one transaction, nothing written when
//! anything is off.

use std::time::Duration;

use inventory_service::deductions::DeductionError;
use inventory_service::deductions::attempt::{self, Entry};
use inventory_service::deductions::queries::StoredDeduction;
use inventory_service::deductions::request::{
    DeductionId, DeductionRequest, DeductionStatus, Items,
};
use inventory_service::deductions::verdict::Verdict;
use inventory_service::stock::queries::StockRow;
use platform::storage::Tx;
use shared::events::RejectionReason;
use shared::ids::ProductId;
use testkit::{Backend, BackendDatabase, eventually, execute_on};

use crate::helpers::database_with_products;

const PRODUCT: i64 = 7;
const OTHER: i64 = 8;

testkit::on_each_backend!(
    each_request_is_judged_against_what_the_earlier_ones_left_in_one_transaction,
    an_id_repeated_in_the_batch_gets_the_first_answer_and_deducts_once,
    a_stored_id_replays_its_first_outcome_even_after_a_restock_and_takes_nothing,
    a_multi_product_request_takes_all_or_nothing_and_names_the_first_failing_product,
    a_batch_that_mixes_product_sets_is_refused_and_writes_nothing,
    an_unknown_stored_status_fails_the_call_instead_of_guessing,
    an_id_recorded_meanwhile_by_another_writer_undoes_the_batch_for_a_retry,
    a_batch_judged_against_the_remembered_stock_writes_and_remembers_what_it_left,
    a_remembered_stock_that_moved_writes_nothing_not_even_a_refusal,
    a_stored_id_in_a_remembered_batch_writes_nothing_and_the_read_replays_it,
);

async fn database(backend: Backend, products: &[(i64, i64)]) -> BackendDatabase {
    database_with_products(backend, "deduction_batch", products).await
}

async fn stock_and_version(db: &BackendDatabase, product: i64) -> (i64, i64) {
    let read = |column: &str| format!("SELECT {column} FROM products WHERE product_id = {product}");
    (
        db.count(&read("stock")).await,
        db.count(&read("version")).await,
    )
}

/// Rows in `deductions`.
async fn recorded(db: &BackendDatabase) -> i64 {
    db.count("SELECT count(*) FROM deductions").await
}

/// `rows` in `deductions`, written by `commits` transactions. The transactions are counted on
/// PostgreSQL only, where rows written together share `xmin` (MySQL shows a row's
/// transaction to no statement).
async fn assert_recorded(db: &BackendDatabase, rows: i64, commits: i64) {
    assert_eq!(recorded(db).await, rows, "rows");
    if let BackendDatabase::Postgres(postgres) = db {
        let counted: i64 = sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM deductions")
            .fetch_one(&postgres.pool)
            .await
            .expect("a count");
        assert_eq!(counted, commits, "transactions");
    }
}

/// Another writer's transaction on `db`.
async fn other_writer(db: &BackendDatabase) -> Tx {
    db.database().begin().await.expect("a transaction")
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
    db: &BackendDatabase,
    requests: &[(DeductionRequest, String)],
) -> Result<Vec<Verdict>, DeductionError> {
    let entries = entries(requests);
    let database = db.database();
    let mut conn = database.acquire().await.expect("a connection");
    attempt::apply_once(conn.conn(), &entries).await
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

async fn each_request_is_judged_against_what_the_earlier_ones_left_in_one_transaction(
    backend: Backend,
) {
    let db = database(backend, &[(PRODUCT, 5)]).await;
    let p = &[PRODUCT];
    let batch = [
        request("a", p, &[2]),
        request("b", p, &[5]),
        request("c", p, &[2]),
        request("d", p, &[2]),
    ];
    let verdicts = apply(&db, &batch).await.expect("applied");
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
    assert_eq!(stock_and_version(&db, PRODUCT).await, (1, 1), "one update");
    assert_recorded(&db, 4, 1).await;
}

async fn an_id_repeated_in_the_batch_gets_the_first_answer_and_deducts_once(backend: Backend) {
    let db = database(backend, &[(PRODUCT, 10)]).await;
    let p = &[PRODUCT];
    let batch = [
        request("a", p, &[1]),
        request("a", p, &[1]),
        request("a", p, &[2]),
        request("b", p, &[2]),
    ];
    let verdicts = apply(&db, &batch).await.expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![
            applied("first", "a"),
            applied("same", "a"),
            ("reused", String::new()),
            applied("first", "b"),
        ]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (7, 1));
    assert_eq!(recorded(&db).await, 2);
}

async fn a_stored_id_replays_its_first_outcome_even_after_a_restock_and_takes_nothing(
    backend: Backend,
) {
    let db = database(backend, &[(PRODUCT, 3)]).await;
    let p = &[PRODUCT];
    let first = [request("x", p, &[1]), request("big", p, &[9])];
    apply(&db, &first).await.expect("applied");
    let restock = "UPDATE products SET stock = stock + 100, version = version + 1";
    db.execute(restock, restock).await;

    let again = [
        request("x", p, &[1]),
        request("x", p, &[2]),
        request("big", p, &[9]),
    ];
    let verdicts = apply(&db, &again).await.expect("replayed");
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
        stock_and_version(&db, PRODUCT).await,
        (102, 2),
        "replays take nothing"
    );
    assert_recorded(&db, 2, 1).await;
}

async fn a_multi_product_request_takes_all_or_nothing_and_names_the_first_failing_product(
    backend: Backend,
) {
    let db = database(backend, &[(PRODUCT, 5), (OTHER, 1)]).await;
    let p = &[PRODUCT, OTHER];
    let batch = [
        request("too-much", p, &[1, 9]),
        request("both", p, &[1, 1]),
        request("one-short", p, &[1, 1]),
    ];
    let verdicts = apply(&db, &batch).await.expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![
            refused(SHORT, OTHER),
            applied("first", "both"),
            refused(SHORT, OTHER),
        ]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (4, 1));
    assert_eq!(stock_and_version(&db, OTHER).await, (0, 1));

    const GHOST: i64 = 99;
    let verdicts = apply(&db, &[request("ghost", &[PRODUCT, GHOST], &[1, 1])])
        .await
        .expect("applied");
    assert_eq!(
        summaries(&verdicts),
        vec![refused(RejectionReason::UnknownProduct, GHOST)]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (4, 1));
}

async fn a_batch_that_mixes_product_sets_is_refused_and_writes_nothing(backend: Backend) {
    let db = database(backend, &[(PRODUCT, 5), (OTHER, 5)]).await;
    // The lock a batch holds covers its first request's products, so every other request
    // must name exactly those.
    let batch = [
        request("a", &[PRODUCT], &[1]),
        request("b", &[PRODUCT, OTHER], &[1, 1]),
    ];
    let error = apply(&db, &batch).await.expect_err("refused");
    assert!(matches!(error, DeductionError::Unexpected(_)), "{error:?}");
    assert_eq!(stock_and_version(&db, PRODUCT).await, (5, 0));
    assert_eq!(recorded(&db).await, 0);
}

async fn an_unknown_stored_status_fails_the_call_instead_of_guessing(backend: Backend) {
    let db = database(backend, &[(PRODUCT, 3)]).await;
    // The CHECK constraints are what keep other values out; without them, reading fails.
    let unchecked = "ALTER TABLE deductions DROP CONSTRAINT deductions_status_known, \
                     DROP CONSTRAINT deductions_rejection_reason_matches";
    db.execute(unchecked, unchecked).await;
    let (odd, fingerprint) = request("odd", &[PRODUCT], &[1]);
    let insert = format!(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('odd', '{fingerprint}', '[]', 'PARTIAL', 200, '')"
    );
    db.execute(&insert, &insert).await;
    let read = apply(&db, &[(odd, fingerprint)]).await;
    assert!(read.is_err(), "{read:?}");
    assert_eq!(stock_and_version(&db, PRODUCT).await, (3, 0));
}

/// On PostgreSQL the read is a snapshot: a product another writer moves between the read and
/// the write undoes the batch, for a retry.
#[tokio::test]
async fn a_product_that_moved_since_it_was_read_undoes_the_batch_for_a_retry() {
    let db = database(Backend::Postgres, &[(PRODUCT, 5)]).await;
    // Another writer holds the product's row: the batch reads version 0, judges, and its
    // write waits; the other writer then commits version 1.
    let mut other = other_writer(&db).await;
    execute_on(
        other.conn(),
        "UPDATE products SET stock = stock + 1, version = version + 1",
    )
    .await;
    let call = apply_in_task(&db, vec![request("a", &[PRODUCT], &[1])]);
    wait_for_a_lock_wait(&db, "").await;
    other.commit().await.expect("the other writer commits");

    let error = call.await.expect("the call ends").expect_err("undone");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(stock_and_version(&db, PRODUCT).await, (6, 1));
    assert_eq!(recorded(&db).await, 0, "nothing of the batch was kept");
}

/// On MySQL the read locks the batch's products: a product another writer holds is waited
/// for, and the batch is judged on what that writer committed.
#[tokio::test]
async fn a_product_held_by_another_writer_is_waited_for_and_judged_as_it_committed() {
    let db = database(Backend::MySql, &[(PRODUCT, 5)]).await;
    let mut other = other_writer(&db).await;
    execute_on(
        other.conn(),
        "UPDATE products SET stock = 0, version = version + 1",
    )
    .await;
    let call = apply_in_task(&db, vec![request("a", &[PRODUCT], &[1])]);
    wait_for_a_lock_wait(&db, "(SELECT 'product'").await;
    // Had the batch read before its wait, it would have judged 5 units there.
    other.commit().await.expect("the other writer commits");

    let verdicts = call.await.expect("the call ends").expect("judged");
    assert_eq!(summaries(&verdicts), vec![refused(SHORT, PRODUCT)]);
    assert_eq!(stock_and_version(&db, PRODUCT).await, (0, 1));
    assert_eq!(recorded(&db).await, 1, "the refusal is recorded");
}

/// [`apply`] in a task of its own, on a database handle of its own.
fn apply_in_task(
    db: &BackendDatabase,
    requests: Vec<(DeductionRequest, String)>,
) -> tokio::task::JoinHandle<Result<Vec<Verdict>, DeductionError>> {
    let database = db.database();
    tokio::spawn(async move {
        let entries = entries(&requests);
        let mut conn = database.acquire().await.expect("a connection");
        attempt::apply_once(conn.conn(), &entries).await
    })
}

async fn an_id_recorded_meanwhile_by_another_writer_undoes_the_batch_for_a_retry(backend: Backend) {
    let db = database(backend, &[(PRODUCT, 5)]).await;
    // Another writer has inserted "x" and not committed: the batch reads no stored "x",
    // judges it first, and its insert waits for that writer.
    let (x, x_fingerprint) = request("x", &[PRODUCT], &[1]);
    let mut other = other_writer(&db).await;
    let insert = format!(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('x', '{x_fingerprint}', '[]', 'APPLIED', 200, \
         '{{\"deduction_id\":\"x\"}}')"
    );
    execute_on(other.conn(), &insert).await;
    let batch = vec![request("y", &[PRODUCT], &[1]), (x, x_fingerprint)];
    let retry = batch.clone();
    let call = apply_in_task(&db, batch);
    wait_for_a_lock_wait(&db, "INSERT INTO deductions").await;
    other.commit().await.expect("the other writer commits");

    let error = call.await.expect("the call ends").expect_err("undone");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(
        stock_and_version(&db, PRODUCT).await,
        (5, 0),
        "nothing of the batch was kept"
    );
    assert_eq!(recorded(&db).await, 1);

    let verdicts = apply(&db, &retry).await.expect("applied on the retry");
    assert_eq!(
        summaries(&verdicts),
        vec![applied("first", "y"), applied("stored", "x")]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (4, 1));
}

/// Waits until the batch waits for a lock another transaction holds: on PostgreSQL its write
/// (`record`, whose text begins so; `pg_stat_activity` keeps only its first kilobyte), on
/// MySQL its statement that begins with `mysql_statement`.
async fn wait_for_a_lock_wait(db: &BackendDatabase, mysql_statement: &str) {
    eventually(Duration::from_secs(30), || async {
        let waiting = db
            .lock_waits("WITH ordered AS MATERIALIZED", mysql_statement)
            .await;
        (waiting == 1).then_some(())
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
    db: &BackendDatabase,
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
    let database = db.database();
    let mut conn = database.acquire().await.expect("a connection");
    attempt::apply_on(conn.conn(), &products, &entries, &[], Some(rows)).await
}

async fn a_batch_judged_against_the_remembered_stock_writes_and_remembers_what_it_left(
    backend: Backend,
) {
    let db = database(backend, &[(PRODUCT, 5)]).await;
    let p = &[PRODUCT];
    let first = apply_remembered(&db, &[request("a", p, &[2])], &[(PRODUCT, 5, 0)])
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
        &db,
        &[request("b", p, &[3]), request("c", p, &[1])],
        &remembered,
    )
    .await
    .expect("applied");
    assert_eq!(
        summaries(&second.verdicts),
        vec![applied("first", "b"), refused(SHORT, PRODUCT)]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (0, 2));
    assert_recorded(&db, 3, 2).await;
}

async fn a_remembered_stock_that_moved_writes_nothing_not_even_a_refusal(backend: Backend) {
    let db = database(backend, &[(PRODUCT, 0)]).await;
    // Remembered empty at version 0; a restock has since added 10 (version 1). Judged against
    // the memory, "a" would be refused: the write must not record that refusal.
    let restock = "UPDATE products SET stock = 10, version = 1";
    db.execute(restock, restock).await;
    let error = apply_remembered(&db, &[request("a", &[PRODUCT], &[1])], &[(PRODUCT, 0, 0)])
        .await
        .expect_err("stale");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(recorded(&db).await, 0);
    assert_eq!(stock_and_version(&db, PRODUCT).await, (10, 1));
}

async fn a_stored_id_in_a_remembered_batch_writes_nothing_and_the_read_replays_it(
    backend: Backend,
) {
    let db = database(backend, &[(PRODUCT, 5)]).await;
    let x = request("x", &[PRODUCT], &[1]);
    apply(&db, std::slice::from_ref(&x)).await.expect("applied");
    let batch = [request("y", &[PRODUCT], &[1]), x];
    let error = apply_remembered(&db, &batch, &[(PRODUCT, 4, 1)])
        .await
        .expect_err("the memory knows no stored ids");
    assert_eq!(sqlstate(&error).as_deref(), Some("40001"), "{error}");
    assert_eq!(stock_and_version(&db, PRODUCT).await, (4, 1));

    let verdicts = apply(&db, &batch).await.expect("read and applied");
    assert_eq!(
        summaries(&verdicts),
        vec![applied("first", "y"), applied("stored", "x")]
    );
    assert_eq!(stock_and_version(&db, PRODUCT).await, (3, 2));
}
