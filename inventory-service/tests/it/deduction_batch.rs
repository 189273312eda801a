//! `apply_deductions`, the database function that applies a whole batch of `POST /deductions`
//! in one call, on its own: every rule of docs/contract.md §3.2 as if the requests came one at a time in
//! order, one transaction per call, nothing written when anything is off.

use std::time::Duration;

use axum::http::StatusCode;
use inventory_service::deductions::queries::{
    self, NewDeduction, Refusals, StoredDeduction, Verdict,
};
use inventory_service::deductions::request::DeductionStatus;
use inventory_service::replay::StoredResponse;
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

fn applied_body(id: &str) -> Vec<u8> {
    format!("applied {id}").into_bytes()
}

/// A request; `fingerprint` stands for its items.
fn request<'a>(id: &'a str, fingerprint: &'a str, quantities: &[i64]) -> NewDeduction<'a> {
    NewDeduction {
        deduction_id: id,
        fingerprint,
        items: serde_json::json!([]),
        quantities: quantities.to_vec(),
        applied: StoredResponse::first(StatusCode::OK, applied_body(id)),
    }
}

fn refusals(products: &[i64]) -> Refusals {
    let each = |status, word: &str| {
        products
            .iter()
            .map(|p| StoredResponse::first(status, format!("{word} {p}").into_bytes()))
            .collect()
    };
    Refusals {
        short: each(StatusCode::CONFLICT, "short"),
        unknown: each(StatusCode::NOT_FOUND, "unknown"),
    }
}

async fn apply(
    pool: &PgPool,
    products: &[i64],
    requests: &[NewDeduction<'_>],
) -> sqlx::Result<Vec<Verdict>> {
    let ids: Vec<ProductId> = products.iter().copied().map(ProductId).collect();
    let mut conn = pool.acquire().await.expect("a connection");
    queries::apply_batch(&mut conn, &ids, requests, &refusals(products)).await
}

fn applied(id: &str) -> StoredDeduction {
    StoredDeduction {
        status: DeductionStatus::Applied,
        rejection_reason: None,
        response_status: 200,
        response_body: applied_body(id),
    }
}

fn refused(reason: RejectionReason, product: i64) -> StoredDeduction {
    let (status, word) = match reason {
        RejectionReason::InsufficientStock => (409, "short"),
        RejectionReason::UnknownProduct => (404, "unknown"),
    };
    StoredDeduction {
        status: DeductionStatus::Rejected,
        rejection_reason: Some(reason),
        response_status: status,
        response_body: format!("{word} {product}").into_bytes(),
    }
}

const SHORT: RejectionReason = RejectionReason::InsufficientStock;

#[tokio::test]
async fn each_request_is_judged_against_what_the_earlier_ones_left_in_one_transaction() {
    let db = database(&[(PRODUCT, 5)]).await;
    let batch = [
        request("a", "two", &[2]),
        request("b", "five", &[5]),
        request("c", "two", &[2]),
        request("d", "two", &[2]),
    ];
    let verdicts = apply(&db.pool, &[PRODUCT], &batch).await.expect("applied");
    assert_eq!(
        verdicts,
        vec![
            Verdict::First(applied("a")),
            Verdict::First(refused(SHORT, PRODUCT)),
            Verdict::First(applied("c")),
            Verdict::First(refused(SHORT, PRODUCT)),
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
    let batch = [
        request("a", "one", &[1]),
        request("a", "one", &[1]),
        request("a", "two", &[2]),
        request("b", "two", &[2]),
    ];
    let verdicts = apply(&db.pool, &[PRODUCT], &batch).await.expect("applied");
    assert_eq!(
        verdicts,
        vec![
            Verdict::First(applied("a")),
            Verdict::Same(applied("a")),
            Verdict::Reused,
            Verdict::First(applied("b")),
        ]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (7, 1));
    assert_eq!(recorded(&db.pool).await.0, 2);
}

#[tokio::test]
async fn a_stored_id_replays_its_first_outcome_even_after_a_restock_and_takes_nothing() {
    let db = database(&[(PRODUCT, 3)]).await;
    let first = [request("x", "one", &[1]), request("big", "nine", &[9])];
    apply(&db.pool, &[PRODUCT], &first).await.expect("applied");
    sqlx::query("UPDATE products SET stock = stock + 100, version = version + 1")
        .execute(&db.pool)
        .await
        .expect("a restock");

    let again = [
        request("x", "one", &[1]),
        request("x", "other", &[1]),
        request("big", "nine", &[9]),
    ];
    let verdicts = apply(&db.pool, &[PRODUCT], &again).await.expect("replayed");
    assert_eq!(
        verdicts,
        vec![
            Verdict::Stored(applied("x")),
            Verdict::Reused,
            Verdict::Stored(refused(SHORT, PRODUCT)),
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
    let batch = [
        request("too-much", "a", &[1, 9]),
        request("both", "b", &[1, 1]),
        request("one-short", "b", &[1, 1]),
    ];
    let verdicts = apply(&db.pool, &[PRODUCT, OTHER], &batch)
        .await
        .expect("applied");
    assert_eq!(
        verdicts,
        vec![
            Verdict::First(refused(SHORT, OTHER)),
            Verdict::First(applied("both")),
            Verdict::First(refused(SHORT, OTHER)),
        ]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
    assert_eq!(stock_and_version(&db.pool, OTHER).await, (0, 1));

    const GHOST: i64 = 99;
    let verdicts = apply(
        &db.pool,
        &[PRODUCT, GHOST],
        &[request("ghost", "g", &[1, 1])],
    )
    .await
    .expect("applied");
    assert_eq!(
        verdicts,
        vec![Verdict::First(refused(
            RejectionReason::UnknownProduct,
            GHOST
        ))]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
}

#[tokio::test]
async fn malformed_input_fails_loudly_and_writes_nothing() {
    let db = database(&[(PRODUCT, 5), (OTHER, 5)]).await;
    let cases: [(&[i64], Vec<NewDeduction<'_>>); 4] = [
        // Products out of order, or twice: the lock order would not hold.
        (&[OTHER, PRODUCT], vec![request("a", "f", &[1, 1])]),
        (&[PRODUCT, PRODUCT], vec![request("a", "f", &[1, 1])]),
        // A quantity per product, and positive.
        (&[PRODUCT], vec![request("a", "f", &[1, 1])]),
        (&[PRODUCT], vec![request("a", "f", &[0])]),
    ];
    for (products, batch) in cases {
        let error = apply(&db.pool, products, &batch)
            .await
            .expect_err("refused");
        let code = error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("22023"), "{products:?}: {error}");
    }
    // A missing id or fingerprint, which the typed call above cannot send.
    for (id, fingerprint) in [(None, Some("f")), (Some("a"), None)] {
        let error = sqlx::query(
            "SELECT * FROM apply_deductions(ARRAY[$1]::int8[], ARRAY[$2]::text[], \
             ARRAY[$3]::text[], ARRAY['[]']::jsonb[], ARRAY[1]::int8[], 200::int2, \
             ARRAY['']::bytea[], 409::int2, ARRAY['']::bytea[], 404::int2, ARRAY['']::bytea[])",
        )
        .bind(PRODUCT)
        .bind(id)
        .bind(fingerprint)
        .execute(&db.pool)
        .await
        .expect_err("refused");
        let code = error.as_database_error().and_then(|e| e.code());
        assert_eq!(
            code.as_deref(),
            Some("22023"),
            "{id:?} {fingerprint:?}: {error}"
        );
    }
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
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('odd', 'f', '[]', 'PARTIAL', 200, '')",
    )
    .execute(&db.pool)
    .await
    .expect("an odd row");
    let read = apply(&db.pool, &[PRODUCT], &[request("odd", "f", &[1])]).await;
    assert!(read.is_err(), "{read:?}");
}

#[tokio::test]
async fn an_id_recorded_meanwhile_by_another_writer_undoes_the_batch_for_a_retry() {
    let db = database(&[(PRODUCT, 5)]).await;
    // Another writer has inserted "x" and not committed: the call reads no stored "x",
    // judges it first, and its insert waits for that writer.
    let mut other = db.pool.begin().await.expect("a transaction");
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('x', 'one', '[]', 'APPLIED', 200, 'applied x')",
    )
    .execute(&mut *other)
    .await
    .expect("the other writer's row");
    let pool = db.pool.clone();
    let call = tokio::spawn(async move {
        apply(
            &pool,
            &[PRODUCT],
            &[request("y", "one", &[1]), request("x", "one", &[1])],
        )
        .await
    });
    eventually(Duration::from_secs(30), || {
        let pool = db.pool.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%apply_deductions%'",
            )
            .fetch_one(&pool)
            .await
            .expect("a count");
            (waiting == 1).then_some(())
        }
    })
    .await;
    other.commit().await.expect("the other writer commits");

    let error = call.await.expect("the call ends").expect_err("undone");
    let code = error.as_database_error().and_then(|e| e.code());
    assert_eq!(code.as_deref(), Some("40001"), "{error}");
    assert_eq!(
        stock_and_version(&db.pool, PRODUCT).await,
        (5, 0),
        "nothing of the batch was kept"
    );
    assert_eq!(recorded(&db.pool).await.0, 1);

    let verdicts = apply(
        &db.pool,
        &[PRODUCT],
        &[request("y", "one", &[1]), request("x", "one", &[1])],
    )
    .await
    .expect("applied on the retry");
    assert_eq!(
        verdicts,
        vec![Verdict::First(applied("y")), Verdict::Stored(applied("x"))]
    );
    assert_eq!(stock_and_version(&db.pool, PRODUCT).await, (4, 1));
}
