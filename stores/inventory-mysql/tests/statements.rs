//! The statements against the machine's MariaDB (or MySQL), each test in a database of its
//! own, `t_inventory_mysql_<uuid>`, built from the inventory migrations and dropped at the
//! end; sessions set up as platform's pool sets them (`platform::storage::mysql`).
//!
//! The server is `TEST_MYSQL_SERVER` (default `mysql://root@127.0.0.1:3306`). What the tests
//! arrange and inspect is plain `sqlx::query`: only the crate's own statements are checked.
//! Every write under test runs in a transaction, as the service runs it; after a failure the
//! transaction is rolled back, as the service rolls it back, and the tables are read again.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use inventory_mysql::deductions::{self, IdKind, NewDeduction, NewHold, Outcomes};
use inventory_mysql::reservations::{self, BatchWrite, NewReservation, NewRow};
use inventory_mysql::{Change, StockRow, Unit, holds, products, restocks, violated_check};
use sqlx::MySqlPool;
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

static INVENTORY: sqlx::migrate::Migrator =
    sqlx::migrate!("../../migrations/inventory-service/mysql");

/// A database of its own for one test, built from the migrations as a service builds its
/// own (sessions included), dropped with its guard.
async fn database() -> TestMySqlDatabase {
    TestMySqlDatabase::create("inventory_mysql", &INVENTORY).await
}

// ---------------------------------------------------------------------------------------
// Arranging and inspecting.

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON")
}

fn items_of(units: &[(i64, i64)]) -> serde_json::Value {
    units
        .iter()
        .map(|(product, quantity)| serde_json::json!({ "product_id": product, "quantity": quantity }))
        .collect()
}

async fn add_product(pool: &MySqlPool, id: i64, stock: i64) {
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES (?, ?, ?)")
        .bind(id)
        .bind(format!("product {id}"))
        .bind(stock)
        .execute(pool)
        .await
        .expect("product");
}

/// A product's (stock, version).
async fn stock_of(pool: &MySqlPool, id: i64) -> (i64, i64) {
    sqlx::query_as("SELECT stock, version FROM products WHERE product_id = ?")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("stock")
}

/// A hold in `state`, due `deadline_secs` from now (negative: past), with `units` (in
/// `held_units` too while `HELD`).
async fn add_hold(
    pool: &MySqlPool,
    id: &str,
    state: &str,
    deadline_secs: i64,
    units: &[(i64, i64)],
) {
    let refused = state == "REFUSED";
    sqlx::query(
        "INSERT INTO holds (hold_id, fingerprint, items, state, rejection_reason, expires_at,
                            response_status, response_body)
         VALUES (?, 'fp', ?, ?, ?,
                 IF(?, NULL, UTC_TIMESTAMP(6) + INTERVAL ? SECOND), 201, 'body')",
    )
    .bind(id)
    .bind(items_of(units).to_string())
    .bind(state)
    .bind(refused.then_some("insufficient_stock"))
    .bind(refused)
    .bind(deadline_secs)
    .execute(pool)
    .await
    .expect("hold");
    if state == "HELD" {
        for (product, quantity) in units {
            sqlx::query("INSERT INTO held_units (hold_id, product_id, quantity) VALUES (?, ?, ?)")
                .bind(id)
                .bind(product)
                .bind(quantity)
                .execute(pool)
                .await
                .expect("units");
        }
    }
}

/// A hold's (state, updated_at).
async fn hold_state(pool: &MySqlPool, id: &str) -> (String, DateTime<Utc>) {
    sqlx::query_as("SELECT state, updated_at FROM holds WHERE hold_id = ?")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("hold state")
}

/// A hold's (product, quantity) rows in `held_units`.
async fn units_of(pool: &MySqlPool, hold: &str) -> Vec<(i64, i64)> {
    sqlx::query_as(
        "SELECT product_id, quantity FROM held_units WHERE hold_id = ? ORDER BY product_id",
    )
    .bind(hold)
    .fetch_all(pool)
    .await
    .expect("units")
}

async fn count(pool: &MySqlPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("count")
}

/// A serialization failure (SQLSTATE 40001) that says `why`.
fn assert_contention(error: &sqlx::Error, why: &str) {
    let database = error
        .as_database_error()
        .unwrap_or_else(|| panic!("a database error, not {error:?}"));
    assert_eq!(database.code().as_deref(), Some("40001"), "{error:?}");
    assert_eq!(database.message(), why);
}

/// Locks `sql`'s rows in a transaction of its own, held until the returned one ends.
async fn hold_lock(pool: &MySqlPool, sql: &'static str) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut tx = pool.begin().await.expect("tx");
    sqlx::query(sql).fetch_all(&mut *tx).await.expect("lock");
    tx
}

fn now_micros() -> DateTime<Utc> {
    use chrono::SubsecRound;
    Utc::now().trunc_subsecs(6)
}

const fn row(stock: i64, version: i64) -> StockRow {
    StockRow { stock, version }
}

const fn change(product_id: i64, delta: i64, version: Option<i64>) -> Change {
    Change {
        product_id,
        delta,
        version,
    }
}

fn sale<'a>(id: &'a str, items: &'a serde_json::Value, body: &'a [u8]) -> NewDeduction<'a> {
    NewDeduction {
        deduction_id: id,
        fingerprint: "fp",
        items,
        status: "APPLIED",
        rejection_reason: None,
        response_status: 200,
        response_body: body,
    }
}

/// Runs `record` in a transaction that is committed.
async fn record_ok(
    pool: &MySqlPool,
    judged: &[(i64, StockRow)],
    changes: &[Change],
    new: &Outcomes<'_>,
) -> deductions::Recorded {
    let mut tx = pool.begin().await.expect("tx");
    let recorded = deductions::record(&mut tx, judged, changes, new)
        .await
        .expect("record");
    tx.commit().await.expect("commit");
    recorded
}

/// Runs `record`, which must fail, in a transaction that is then rolled back.
async fn record_err(
    pool: &MySqlPool,
    judged: &[(i64, StockRow)],
    changes: &[Change],
    new: &Outcomes<'_>,
) -> sqlx::Error {
    let mut tx = pool.begin().await.expect("tx");
    let error = deductions::record(&mut tx, judged, changes, new)
        .await
        .expect_err("the record fails");
    tx.rollback().await.expect("rollback");
    error
}

// ---------------------------------------------------------------------------------------
// Deductions: read and record.

#[tokio::test]
async fn record_writes_the_stock_change_and_every_outcome_as_given() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_product(&db.pool, 2, 5).await;
    let items = items_of(&[(1, 3), (2, 1)]);
    let hold_items = items_of(&[(1, 2)]);
    let body: Vec<u8> = vec![0, 1, 2, 0xff, b'{', b'"'];
    let units = [Unit {
        product_id: 1,
        quantity: 2,
    }];
    let created = now_micros();
    let expires = created + TimeDelta::seconds(60);
    let new = Outcomes {
        deductions: vec![
            sale("sale-1", &items, &body),
            NewDeduction {
                status: "REJECTED",
                rejection_reason: Some("insufficient_stock"),
                response_status: 409,
                ..sale("sale-2", &items, b"refused")
            },
        ],
        holds: vec![
            NewHold {
                hold_id: "hold-1",
                fingerprint: "hfp",
                items: &hold_items,
                rejection_reason: None,
                response_status: 201,
                response_body: b"held",
                held: Some(&units),
                created_at: created,
                expires_at: expires,
            },
            NewHold {
                hold_id: "hold-2",
                fingerprint: "hfp2",
                items: &hold_items,
                rejection_reason: Some("unknown_product"),
                response_status: 409,
                response_body: b"nothing held",
                held: None,
                created_at: created,
                expires_at: expires,
            },
        ],
        ..Outcomes::default()
    };
    let judged = [(1, row(10, 0)), (2, row(5, 0))];
    let changes = [change(1, -5, Some(0)), change(2, -1, Some(0))];
    let recorded = record_ok(&db.pool, &judged, &changes, &new).await;
    assert_eq!(recorded.written, vec![(1, row(5, 1)), (2, row(4, 1))]);
    assert!(recorded.decided.is_empty());
    assert_eq!(stock_of(&db.pool, 1).await, (5, 1));
    assert_eq!(stock_of(&db.pool, 2).await, (4, 1));

    type DeductionRow = (String, String, String, String, Option<String>, i16, Vec<u8>);
    let rows: Vec<DeductionRow> = sqlx::query_as(
        "SELECT deduction_id, fingerprint, items, status, rejection_reason, response_status,
                response_body
         FROM deductions ORDER BY deduction_id",
    )
    .fetch_all(&db.pool)
    .await
    .expect("deductions");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            &rows[0].0, &rows[0].1, &rows[0].3, &rows[0].4, rows[0].5, &rows[0].6
        ),
        (
            &"sale-1".to_owned(),
            &"fp".to_owned(),
            &"APPLIED".to_owned(),
            &None,
            200,
            &body
        )
    );
    assert_eq!(json(&rows[0].2), items);
    assert_eq!(
        (
            &rows[1].0,
            &rows[1].3,
            rows[1].4.as_deref(),
            rows[1].5,
            rows[1].6.as_slice()
        ),
        (
            &"sale-2".to_owned(),
            &"REJECTED".to_owned(),
            Some("insufficient_stock"),
            409,
            &b"refused"[..]
        )
    );

    type HoldDbRow = (
        String,
        Option<String>,
        String,
        String,
        Option<String>,
        Option<DateTime<Utc>>,
        Option<i16>,
        Option<Vec<u8>>,
        DateTime<Utc>,
        DateTime<Utc>,
    );
    let holds_rows: Vec<HoldDbRow> = sqlx::query_as(
        "SELECT hold_id, fingerprint, items, state, rejection_reason, expires_at,
                response_status, response_body, created_at, updated_at
         FROM holds ORDER BY hold_id",
    )
    .fetch_all(&db.pool)
    .await
    .expect("holds");
    let held = &holds_rows[0];
    assert_eq!(held.0, "hold-1");
    assert_eq!(held.1.as_deref(), Some("hfp"));
    assert_eq!(json(&held.2), hold_items);
    assert_eq!((held.3.as_str(), held.4.as_deref()), ("HELD", None));
    assert_eq!(held.5, Some(expires), "the deadline, to the microsecond");
    assert_eq!((held.6, held.7.as_deref()), (Some(201), Some(&b"held"[..])));
    assert_eq!(
        (held.8, held.9),
        (created, created),
        "stamped at the batch's clock"
    );
    let refused = &holds_rows[1];
    assert_eq!(refused.0, "hold-2");
    assert_eq!(
        (refused.3.as_str(), refused.4.as_deref(), refused.5),
        ("REFUSED", Some("unknown_product"), None)
    );
    assert_eq!(units_of(&db.pool, "hold-1").await, vec![(1, 2)]);
    assert!(units_of(&db.pool, "hold-2").await.is_empty());

    // A repeat reads its first outcome back.
    let mut conn = db.pool.acquire().await.expect("conn");
    let read = deductions::read(
        &mut conn,
        &[2, 1, 3, 1],
        &["sale-1", "sale-2", "sale-3"],
        &["hold-1", "hold-2", "hold-3"],
    )
    .await
    .expect("read");
    assert_eq!(read.stock, vec![(1, row(5, 1)), (2, row(4, 1))]);
    let mut stored = read.stored.clone();
    stored.sort_by(|a, b| a.id.cmp(&b.id));
    type Summary<'a> = (
        IdKind,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<i16>,
    );
    let summary: Vec<Summary<'_>> = stored
        .iter()
        .map(|s| {
            (
                s.kind,
                s.id.as_str(),
                s.status.as_deref(),
                s.rejection_reason.as_deref(),
                s.response_status,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (IdKind::Hold, "hold-1", Some("APPLIED"), None, Some(201)),
            (
                IdKind::Hold,
                "hold-2",
                Some("REJECTED"),
                Some("unknown_product"),
                Some(409)
            ),
            (
                IdKind::Deduction,
                "sale-1",
                Some("APPLIED"),
                None,
                Some(200)
            ),
            (
                IdKind::Deduction,
                "sale-2",
                Some("REJECTED"),
                Some("insufficient_stock"),
                Some(409)
            ),
        ]
    );
    assert_eq!(stored[2].response_body.as_deref(), Some(body.as_slice()));
    assert_eq!(stored[2].fingerprint.as_deref(), Some("fp"));
}

#[tokio::test]
async fn read_tells_a_tombstone_and_keeps_ids_byte_for_byte() {
    let db = database().await;
    let items = items_of(&[(1, 1)]);
    let new = Outcomes {
        deductions: vec![sale("Ab", &items, b"1"), sale("ab ", &items, b"2")],
        ..Outcomes::default()
    };
    record_ok(&db.pool, &[], &[], &new).await;
    let long = "x".repeat(128);
    let new = Outcomes {
        deductions: vec![sale(&long, &items, b"3")],
        ..Outcomes::default()
    };
    record_ok(&db.pool, &[], &[], &new).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    holds::cancel_all(&mut conn, &["gone"])
        .await
        .expect("tombstone");

    let longer = "x".repeat(200);
    let read = deductions::read(
        &mut conn,
        &[],
        &["ab", "AB", "Ab", "ab ", "ab  ", &longer],
        &["gone", "GONE"],
    )
    .await
    .expect("read");
    assert!(read.stock.is_empty());
    let mut ids: Vec<&str> = read.stored.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["Ab", "ab ", "gone"],
        "no case folding, no padding, and a longer id is never cut to match a shorter one"
    );
    let tombstone = read
        .stored
        .iter()
        .find(|s| s.id == "gone")
        .expect("tombstone");
    assert_eq!(tombstone.kind, IdKind::Hold);
    assert_eq!(
        (
            &tombstone.fingerprint,
            tombstone.response_status,
            &tombstone.response_body
        ),
        (&None, None, &None),
        "a tombstone has no outcome"
    );
}

#[tokio::test]
async fn record_writes_nothing_when_a_guard_falls_short() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_product(&db.pool, 2, 3).await;
    let items = items_of(&[(1, 1)]);
    let body = b"body".as_slice();
    let with = |id: &'static str| Outcomes {
        deductions: vec![sale(id, &items, body)],
        ..Outcomes::default()
    };
    const MOVED: &str = "a product's stock moved since it was read";

    // A version that moved.
    let error = record_err(&db.pool, &[], &[change(1, -1, Some(7))], &with("a")).await;
    assert_contention(&error, MOVED);
    // Short of stock: never written below zero.
    let error = record_err(
        &db.pool,
        &[],
        &[change(1, -1, Some(0)), change(2, -4, Some(0))],
        &with("b"),
    )
    .await;
    assert_contention(&error, MOVED);
    // A product judged, not changed, that moved.
    let error = record_err(
        &db.pool,
        &[(2, row(3, 9))],
        &[change(1, -1, Some(0))],
        &with("c"),
    )
    .await;
    assert_contention(&error, "a product moved since the batch was judged");
    // A product that does not exist.
    let error = record_err(&db.pool, &[], &[change(99, 1, None)], &with("d")).await;
    assert_contention(&error, MOVED);
    assert_eq!(stock_of(&db.pool, 1).await, (10, 0));
    assert_eq!(stock_of(&db.pool, 2).await, (3, 0));
    assert_eq!(count(&db.pool, "deductions").await, 0);

    // An id stored before: the remembered path knows no stored ids.
    record_ok(&db.pool, &[], &[change(1, -1, Some(0))], &with("e")).await;
    assert_eq!(stock_of(&db.pool, 1).await, (9, 1));
    let error = record_err(&db.pool, &[], &[change(1, -1, Some(1))], &with("e")).await;
    assert_contention(
        &error,
        "a deduction id of this batch was recorded meanwhile",
    );
    assert_eq!(
        stock_of(&db.pool, 1).await,
        (9, 1),
        "the stock change went with it"
    );

    // A hold id cancelled before its try (a tombstone).
    let mut conn = db.pool.acquire().await.expect("conn");
    holds::cancel_all(&mut conn, &["ghost"])
        .await
        .expect("tombstone");
    let units = [Unit {
        product_id: 1,
        quantity: 2,
    }];
    let created = now_micros();
    let new = Outcomes {
        holds: vec![NewHold {
            hold_id: "ghost",
            fingerprint: "fp",
            items: &items,
            rejection_reason: None,
            response_status: 201,
            response_body: body,
            held: Some(&units),
            created_at: created,
            expires_at: created + TimeDelta::seconds(60),
        }],
        ..Outcomes::default()
    };
    let error = record_err(&db.pool, &[], &[change(1, -2, Some(1))], &new).await;
    assert_contention(&error, "a hold id of this batch was recorded meanwhile");
    assert!(units_of(&db.pool, "ghost").await.is_empty());
    assert_eq!(hold_state(&db.pool, "ghost").await.0, "CANCELLED");
    assert_eq!(stock_of(&db.pool, 1).await, (9, 1));
    assert_eq!(count(&db.pool, "deductions").await, 1);
}

#[tokio::test]
async fn a_change_read_without_a_version_or_of_nothing_is_still_written_and_counted() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_product(&db.pool, 2, 10).await;
    sqlx::query("UPDATE products SET version = 5 WHERE product_id = 1")
        .execute(&db.pool)
        .await
        .expect("version");
    // A give-back to a product not read checks no version; a change of 0 (a product of the
    // batch that only a cancel's give-back writes) still changes its row: its version.
    let recorded = record_ok(
        &db.pool,
        &[],
        &[change(1, 2, None), change(2, 0, Some(0))],
        &Outcomes::default(),
    )
    .await;
    assert_eq!(recorded.written, vec![(1, row(12, 6)), (2, row(10, 1))]);
    assert_eq!(stock_of(&db.pool, 1).await, (12, 6));
    assert_eq!(stock_of(&db.pool, 2).await, (10, 1));
}

#[tokio::test]
async fn record_ends_the_holds_of_its_batch_and_gives_a_cancel_s_units_back_in_its_update() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_hold(&db.pool, "confirm", "HELD", 60, &[(1, 2)]).await;
    add_hold(&db.pool, "cancel", "HELD", 60, &[(1, 3)]).await;
    add_hold(&db.pool, "confirm-late", "HELD", -5, &[(1, 4)]).await;
    add_hold(&db.pool, "cancel-late", "HELD", -5, &[(1, 1)]).await;
    add_hold(&db.pool, "done", "CONFIRMED", 60, &[(1, 5)]).await;
    add_hold(&db.pool, "busy", "HELD", 60, &[(1, 6)]).await;
    let (_, done_before) = hold_state(&db.pool, "done").await;
    // Another writer holds `busy`: skipped, never waited for.
    let other = hold_lock(
        &db.pool,
        "SELECT * FROM holds WHERE hold_id = 'busy' FOR UPDATE",
    )
    .await;

    let new = Outcomes {
        confirms: vec!["confirm", "confirm-late", "done", "unknown"],
        cancels: vec!["cancel", "cancel-late", "busy"],
        ..Outcomes::default()
    };
    let started = Instant::now();
    let recorded = record_ok(&db.pool, &[], &[change(1, -1, Some(0))], &new).await;
    assert!(started.elapsed() < Duration::from_millis(900), "no wait");
    other.rollback().await.expect("rollback");

    // 10 - 1, plus the units of the two cancels: one update, one version.
    assert_eq!(recorded.written, vec![(1, row(13, 1))]);
    assert_eq!(stock_of(&db.pool, 1).await, (13, 1));
    let mut decided: Vec<(&str, &str, bool, bool)> = recorded
        .decided
        .iter()
        .map(|h| (h.hold_id.as_str(), h.state.as_str(), h.due, h.changed))
        .collect();
    decided.sort_unstable();
    assert_eq!(
        decided,
        vec![
            ("cancel", "CANCELLED", false, true),
            ("cancel-late", "EXPIRED", true, true),
            ("confirm", "CONFIRMED", false, true),
        ]
    );
    for hold in &recorded.decided {
        let (state, updated_at) = hold_state(&db.pool, &hold.hold_id).await;
        assert_eq!(
            (state.as_str(), updated_at),
            (hold.state.as_str(), hold.updated_at)
        );
        assert!(units_of(&db.pool, &hold.hold_id).await.is_empty());
        assert_eq!(hold.items, items_of(&units_for(&hold.hold_id)));
    }
    assert_eq!(hold_state(&db.pool, "confirm-late").await.0, "HELD");
    assert_eq!(units_of(&db.pool, "confirm-late").await, vec![(1, 4)]);
    assert_eq!(hold_state(&db.pool, "busy").await.0, "HELD");
    assert_eq!(units_of(&db.pool, "busy").await, vec![(1, 6)]);
    assert_eq!(
        hold_state(&db.pool, "done").await,
        ("CONFIRMED".to_owned(), done_before)
    );
}

fn units_for(hold: &str) -> Vec<(i64, i64)> {
    match hold {
        "confirm" => vec![(1, 2)],
        "cancel" => vec![(1, 3)],
        "cancel-late" => vec![(1, 1)],
        _ => vec![],
    }
}

#[tokio::test]
async fn a_product_another_writer_holds_is_waited_for_then_contention() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    let other = hold_lock(
        &db.pool,
        "SELECT * FROM products WHERE product_id = 1 FOR UPDATE",
    )
    .await;
    let error = record_err(
        &db.pool,
        &[],
        &[change(1, -1, Some(0))],
        &Outcomes::default(),
    )
    .await;
    let mysql = error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .expect("a MySQL error");
    assert_eq!(
        mysql.number(),
        1205,
        "a lock wait past innodb_lock_wait_timeout"
    );
    other.rollback().await.expect("rollback");
    assert_eq!(stock_of(&db.pool, 1).await, (10, 0));
}

// ---------------------------------------------------------------------------------------
// Holds: find, confirm, cancel, expiry, retention.

#[tokio::test]
async fn find_reads_a_hold_and_whether_its_deadline_passed() {
    let db = database().await;
    add_hold(&db.pool, "ahead", "HELD", 60, &[(1, 2)]).await;
    add_hold(&db.pool, "past", "HELD", -1, &[(1, 2)]).await;
    add_hold(&db.pool, "refused", "REFUSED", 0, &[(1, 2)]).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    let ahead = holds::find(&mut conn, "ahead")
        .await
        .expect("find")
        .expect("a hold");
    assert_eq!(
        (ahead.state.as_str(), ahead.due, ahead.changed),
        ("HELD", false, false)
    );
    assert_eq!(ahead.items, items_of(&[(1, 2)]));
    assert!(ahead.expires_at.is_some());
    let past = holds::find(&mut conn, "past")
        .await
        .expect("find")
        .expect("a hold");
    assert!(past.due);
    let refused = holds::find(&mut conn, "refused")
        .await
        .expect("find")
        .expect("a hold");
    assert_eq!((refused.expires_at, refused.due), (None, false));
    assert!(
        holds::find(&mut conn, "PAST")
            .await
            .expect("find")
            .is_none()
    );
}

#[tokio::test]
async fn confirm_all_confirms_held_holds_before_their_deadline_once() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_hold(&db.pool, "a", "HELD", 60, &[(1, 2)]).await;
    add_hold(&db.pool, "late", "HELD", -5, &[(1, 3)]).await;
    add_hold(&db.pool, "gone", "CANCELLED", 60, &[]).await;
    let mut tx = db.pool.begin().await.expect("tx");
    let mut rows = holds::confirm_all(&mut tx, &["late", "a", "gone", "missing", "a"])
        .await
        .expect("confirm");
    tx.commit().await.expect("commit");
    rows.sort_by(|x, y| x.hold_id.cmp(&y.hold_id));
    let summary: Vec<(&str, &str, bool, bool)> = rows
        .iter()
        .map(|h| (h.hold_id.as_str(), h.state.as_str(), h.due, h.changed))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a", "CONFIRMED", false, true),
            ("gone", "CANCELLED", false, false),
            ("late", "HELD", true, false),
        ]
    );
    let (state, confirmed_at) = hold_state(&db.pool, "a").await;
    assert_eq!(
        (state.as_str(), confirmed_at),
        ("CONFIRMED", rows[0].updated_at)
    );
    assert!(
        units_of(&db.pool, "a").await.is_empty(),
        "its units are sold"
    );
    assert_eq!(units_of(&db.pool, "late").await, vec![(1, 3)]);
    assert_eq!(
        stock_of(&db.pool, 1).await,
        (10, 0),
        "a confirm writes no product"
    );

    // Again: the same answer, nothing changed.
    let mut tx = db.pool.begin().await.expect("tx");
    let again = holds::confirm_all(&mut tx, &["a"]).await.expect("confirm");
    tx.commit().await.expect("commit");
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].state.as_str(), again[0].changed),
        ("CONFIRMED", false)
    );
    assert_eq!(hold_state(&db.pool, "a").await.1, confirmed_at);
}

#[tokio::test]
async fn cancel_all_ends_held_holds_gives_units_back_once_and_leaves_tombstones() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_product(&db.pool, 2, 10).await;
    add_hold(&db.pool, "a", "HELD", 60, &[(1, 2), (2, 1)]).await;
    add_hold(&db.pool, "late", "HELD", -5, &[(1, 3)]).await;
    add_hold(&db.pool, "sold", "CONFIRMED", 60, &[]).await;
    let mut tx = db.pool.begin().await.expect("tx");
    let mut rows = holds::cancel_all(&mut tx, &["sold", "new", "late", "a", "new"])
        .await
        .expect("cancel");
    tx.commit().await.expect("commit");
    rows.sort_by(|x, y| x.hold_id.cmp(&y.hold_id));
    let summary: Vec<(&str, &str, bool, bool)> = rows
        .iter()
        .map(|h| (h.hold_id.as_str(), h.state.as_str(), h.due, h.changed))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a", "CANCELLED", false, true),
            ("late", "EXPIRED", true, true),
            ("new", "CANCELLED", false, true),
            ("sold", "CONFIRMED", false, false),
        ]
    );
    // Both holds' units on product 1 in one update: one version.
    assert_eq!(stock_of(&db.pool, 1).await, (15, 1));
    assert_eq!(stock_of(&db.pool, 2).await, (11, 1));
    assert!(units_of(&db.pool, "a").await.is_empty());
    assert!(units_of(&db.pool, "late").await.is_empty());
    for hold in &rows {
        let (state, updated_at) = hold_state(&db.pool, &hold.hold_id).await;
        assert_eq!(
            (state.as_str(), updated_at),
            (hold.state.as_str(), hold.updated_at)
        );
    }
    type Tombstone = (
        Option<String>,
        String,
        Option<DateTime<Utc>>,
        Option<i16>,
        Option<Vec<u8>>,
    );
    let tombstone: Tombstone = sqlx::query_as(
        "SELECT fingerprint, items, expires_at, response_status, response_body
         FROM holds WHERE hold_id = 'new'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("tombstone");
    assert_eq!(tombstone.0, None);
    assert_eq!(json(&tombstone.1), serde_json::json!([]));
    assert_eq!((tombstone.2, tombstone.3, tombstone.4), (None, None, None));
    assert_eq!(rows[2].items, serde_json::json!([]));

    // Again: nothing ended twice, nothing given back twice, no second tombstone.
    let mut tx = db.pool.begin().await.expect("tx");
    let again = holds::cancel_all(&mut tx, &["a", "late", "new"])
        .await
        .expect("cancel");
    tx.commit().await.expect("commit");
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|h| !h.changed));
    assert_eq!(stock_of(&db.pool, 1).await, (15, 1));
    assert_eq!(stock_of(&db.pool, 2).await, (11, 1));
    assert_eq!(count(&db.pool, "holds").await, 4);
}

#[tokio::test]
async fn a_cancel_waits_for_a_try_being_written_and_then_cancels_it() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    // The try's transaction: its hold written, not yet committed.
    let mut try_tx = db.pool.begin().await.expect("tx");
    sqlx::query(
        "INSERT INTO holds (hold_id, fingerprint, items, state, expires_at, response_status,
                            response_body)
         VALUES ('w', 'fp', '[]', 'HELD', UTC_TIMESTAMP(6) + INTERVAL 60 SECOND, 201, 'b')",
    )
    .execute(&mut *try_tx)
    .await
    .expect("try");
    sqlx::query("INSERT INTO held_units (hold_id, product_id, quantity) VALUES ('w', 1, 4)")
        .execute(&mut *try_tx)
        .await
        .expect("units");
    let pool = db.pool.clone();
    let cancel = tokio::spawn(async move {
        let mut tx = pool.begin().await.expect("tx");
        let rows = holds::cancel_all(&mut tx, &["w"]).await.expect("cancel");
        tx.commit().await.expect("commit");
        rows
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    try_tx.commit().await.expect("commit");
    let rows = cancel.await.expect("cancel");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].state.as_str(), rows[0].changed),
        ("CANCELLED", true)
    );
    assert_eq!(stock_of(&db.pool, 1).await, (14, 1), "its units given back");
    assert!(units_of(&db.pool, "w").await.is_empty());
}

#[tokio::test]
async fn expire_due_expires_the_oldest_due_holds_skipping_locked_ones() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_hold(&db.pool, "oldest", "HELD", -20, &[(1, 1)]).await;
    add_hold(&db.pool, "older", "HELD", -10, &[(1, 2)]).await;
    add_hold(&db.pool, "ahead", "HELD", 60, &[(1, 4)]).await;
    add_hold(&db.pool, "done", "CONFIRMED", -30, &[]).await;

    let mut tx = db.pool.begin().await.expect("tx");
    let swept = holds::expire_due(&mut tx, 1).await.expect("sweep");
    tx.commit().await.expect("commit");
    assert_eq!(
        swept,
        holds::Swept {
            expired: 1,
            overdue: 1
        }
    );
    assert_eq!(hold_state(&db.pool, "oldest").await.0, "EXPIRED");
    assert_eq!(hold_state(&db.pool, "older").await.0, "HELD");
    assert_eq!(stock_of(&db.pool, 1).await, (11, 1));
    assert!(units_of(&db.pool, "oldest").await.is_empty());

    // A due hold another writer holds is left to it, without a wait, and still overdue.
    let other = hold_lock(
        &db.pool,
        "SELECT * FROM holds WHERE hold_id = 'older' FOR UPDATE",
    )
    .await;
    let started = Instant::now();
    let mut tx = db.pool.begin().await.expect("tx");
    let swept = holds::expire_due(&mut tx, 10).await.expect("sweep");
    tx.commit().await.expect("commit");
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(
        swept,
        holds::Swept {
            expired: 0,
            overdue: 1
        }
    );
    other.rollback().await.expect("rollback");

    let mut tx = db.pool.begin().await.expect("tx");
    let swept = holds::expire_due(&mut tx, 10).await.expect("sweep");
    tx.commit().await.expect("commit");
    assert_eq!(
        swept,
        holds::Swept {
            expired: 1,
            overdue: 0
        }
    );
    assert_eq!(stock_of(&db.pool, 1).await, (13, 2));
    assert_eq!(hold_state(&db.pool, "ahead").await.0, "HELD");
    assert_eq!(hold_state(&db.pool, "done").await.0, "CONFIRMED");
}

#[tokio::test]
async fn delete_finished_deletes_only_old_finished_holds_a_batch_at_a_time() {
    let db = database().await;
    add_hold(&db.pool, "confirmed", "CONFIRMED", -10, &[]).await;
    add_hold(&db.pool, "refused", "REFUSED", 0, &[]).await;
    add_hold(&db.pool, "expired", "EXPIRED", -10, &[]).await;
    add_hold(&db.pool, "held", "HELD", -10, &[(1, 1)]).await;
    add_hold(&db.pool, "recent", "CANCELLED", -10, &[]).await;
    sqlx::query(
        "UPDATE holds SET updated_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR
         WHERE hold_id <> 'recent'",
    )
    .execute(&db.pool)
    .await
    .expect("age");
    let hour = Duration::from_secs(3600);
    let mut conn = db.pool.acquire().await.expect("conn");
    assert_eq!(
        holds::delete_finished(&mut conn, hour, 2)
            .await
            .expect("delete"),
        2
    );
    assert_eq!(
        holds::delete_finished(&mut conn, hour, 2)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        holds::delete_finished(&mut conn, hour, 2)
            .await
            .expect("delete"),
        0
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT hold_id FROM holds ORDER BY hold_id")
        .fetch_all(&db.pool)
        .await
        .expect("left");
    assert_eq!(left, ["held", "recent"]);
}

#[tokio::test]
async fn hold_ids_differing_in_case_or_padding_are_distinct_holds() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_hold(&db.pool, "ab", "HELD", 60, &[(1, 2)]).await;
    let mut tx = db.pool.begin().await.expect("tx");
    let rows = holds::cancel_all(&mut tx, &["Ab", "ab "])
        .await
        .expect("cancel");
    tx.commit().await.expect("commit");
    assert!(
        rows.iter()
            .all(|h| h.changed && h.items == serde_json::json!([]))
    );
    assert_eq!(rows.len(), 2, "two tombstones");
    assert_eq!(hold_state(&db.pool, "ab").await.0, "HELD");
    assert_eq!(stock_of(&db.pool, 1).await, (10, 0));
}

// ---------------------------------------------------------------------------------------
// Reservations: read a batch, write a batch, find.

async fn add_reservation(pool: &MySqlPool, order: Uuid, state: &str, units: &[(i64, i64)]) {
    sqlx::query(
        "INSERT INTO reservations (order_id, state, items, rejection_reason) VALUES (?, ?, ?, ?)",
    )
    .bind(order)
    .bind(state)
    .bind(items_of(units).to_string())
    .bind((state == "REJECTED").then_some("insufficient_stock"))
    .execute(pool)
    .await
    .expect("reservation");
}

async fn add_message(pool: &MySqlPool, id: Uuid) {
    sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES (?, 'order.created')")
        .bind(id)
        .execute(pool)
        .await
        .expect("message");
}

#[tokio::test]
async fn read_batch_reads_seen_ids_reservations_and_the_stock_the_batch_may_change() {
    let db = database().await;
    for id in 1..=5 {
        add_product(&db.pool, id, id * 10).await;
    }
    let (seen, unseen) = (Uuid::new_v4(), Uuid::new_v4());
    add_message(&db.pool, seen).await;
    let (applied, rejected, released, unknown) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    add_reservation(&db.pool, applied, "APPLIED", &[(1, 2), (3, 1)]).await;
    add_reservation(&db.pool, rejected, "REJECTED", &[(4, 1)]).await;
    add_reservation(&db.pool, released, "RELEASED", &[(5, 1)]).await;

    let mut conn = db.pool.acquire().await.expect("conn");
    let read = reservations::read_batch(
        &mut conn,
        &[seen, unseen],
        &[applied, rejected, released, unknown],
        &[2],
        &[applied, rejected, released],
    )
    .await
    .expect("read");
    assert_eq!(read.seen, vec![seen]);
    let mut found: Vec<(Uuid, &str, Option<&str>)> = read
        .reservations
        .iter()
        .map(|r| (r.order_id, r.state.as_str(), r.rejection_reason.as_deref()))
        .collect();
    found.sort_unstable();
    let mut expected = vec![
        (applied, "APPLIED", None),
        (rejected, "REJECTED", Some("insufficient_stock")),
        (released, "RELEASED", None),
    ];
    expected.sort_unstable();
    assert_eq!(found, expected);
    let applied_row = read
        .reservations
        .iter()
        .find(|r| r.order_id == applied)
        .expect("row");
    assert_eq!(applied_row.items, items_of(&[(1, 2), (3, 1)]));
    // Product 2 for the creations, 1 and 3 for the cancelled order still APPLIED; not 4 or 5.
    assert_eq!(
        read.stock,
        vec![(1, row(10, 0)), (2, row(20, 0)), (3, row(30, 0))]
    );
    assert!(read.busy.is_empty());

    // A product another transaction holds is busy, learnt without a wait.
    let other = hold_lock(
        &db.pool,
        "SELECT * FROM products WHERE product_id = 3 FOR UPDATE",
    )
    .await;
    let started = Instant::now();
    let read = reservations::read_batch(&mut conn, &[], &[applied], &[2, 9], &[applied])
        .await
        .expect("read");
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(read.stock, vec![(1, row(10, 0)), (2, row(20, 0))]);
    assert_eq!(
        read.busy,
        vec![3],
        "an unknown product is neither free nor busy"
    );
    other.rollback().await.expect("rollback");
}

#[tokio::test]
async fn write_batch_writes_stock_reservations_releases_messages_and_outbox_rows() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    add_product(&db.pool, 2, 5).await;
    let (created, refused, cancelled) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    add_reservation(&db.pool, cancelled, "APPLIED", &[(2, 1)]).await;
    let (m1, m2, m3) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (event, payload, headers) = (
        Uuid::new_v4(),
        serde_json::json!({ "order_id": created.to_string() }),
        serde_json::json!({ "traceparent": "00-abc-01" }),
    );
    let write = BatchWrite {
        judged: vec![(1, row(10, 0)), (2, row(5, 0))],
        changes: vec![change(1, -2, Some(0)), change(2, 1, Some(0))],
        inserted: vec![
            NewReservation {
                order_id: created,
                state: "APPLIED".to_owned(),
                items: items_of(&[(1, 2)]),
                rejection_reason: None,
            },
            NewReservation {
                order_id: refused,
                state: "REJECTED".to_owned(),
                items: items_of(&[(1, 99)]),
                rejection_reason: Some("insufficient_stock".to_owned()),
            },
        ],
        released: vec![cancelled],
        recorded: vec![
            (m1, "order.created"),
            (m2, "order.created"),
            (m3, "order.cancelled"),
        ],
        outbox: vec![NewRow {
            event_id: event,
            exchange: "inventory.events",
            routing_key: "inventory.reserved",
            payload: &payload,
            headers: &headers,
        }],
    };
    let mut tx = db.pool.begin().await.expect("tx");
    reservations::write_batch(&mut tx, &write)
        .await
        .expect("write");
    tx.commit().await.expect("commit");

    assert_eq!(stock_of(&db.pool, 1).await, (8, 1));
    assert_eq!(stock_of(&db.pool, 2).await, (6, 1));
    let mut conn = db.pool.acquire().await.expect("conn");
    let row_of = |r: Option<reservations::ReservationRow>| {
        let r = r.expect("a reservation");
        (r.state, r.items, r.rejection_reason)
    };
    assert_eq!(
        row_of(reservations::find(&mut conn, created).await.expect("find")),
        ("APPLIED".to_owned(), items_of(&[(1, 2)]), None)
    );
    assert_eq!(
        row_of(reservations::find(&mut conn, refused).await.expect("find")),
        (
            "REJECTED".to_owned(),
            items_of(&[(1, 99)]),
            Some("insufficient_stock".to_owned())
        )
    );
    assert_eq!(
        row_of(
            reservations::find(&mut conn, cancelled)
                .await
                .expect("find")
        )
        .0,
        "RELEASED"
    );
    assert!(
        reservations::find(&mut conn, Uuid::new_v4())
            .await
            .expect("find")
            .is_none()
    );
    let mut kinds: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT message_id, kind FROM processed_messages")
            .fetch_all(&db.pool)
            .await
            .expect("messages");
    kinds.sort_unstable();
    let mut expected = vec![
        (m1, "order.created".to_owned()),
        (m2, "order.created".to_owned()),
        (m3, "order.cancelled".to_owned()),
    ];
    expected.sort_unstable();
    assert_eq!(kinds, expected);
    let outbox: (Uuid, String, String) =
        sqlx::query_as("SELECT event_id, routing_key, payload FROM outbox")
            .fetch_one(&db.pool)
            .await
            .expect("outbox");
    assert_eq!((outbox.0, outbox.1.as_str()), (event, "inventory.reserved"));
    assert_eq!(json(&outbox.2), payload);
}

#[tokio::test]
async fn write_batch_writes_nothing_when_what_it_relied_on_moved() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    let (existing, applied, released) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    add_reservation(&db.pool, existing, "REJECTED", &[(1, 1)]).await;
    add_reservation(&db.pool, applied, "APPLIED", &[(1, 1)]).await;
    add_reservation(&db.pool, released, "RELEASED", &[(1, 1)]).await;
    let recorded = Uuid::new_v4();
    add_message(&db.pool, recorded).await;
    let payload = serde_json::json!({});
    let outbox = || {
        vec![NewRow {
            event_id: Uuid::new_v4(),
            exchange: "inventory.events",
            routing_key: "inventory.reserved",
            payload: &payload,
            headers: &payload,
        }]
    };
    let new = |order_id| NewReservation {
        order_id,
        state: "APPLIED".to_owned(),
        items: items_of(&[(1, 1)]),
        rejection_reason: None,
    };
    // Every case also takes a unit of product 1, releases `applied` and writes an outbox row:
    // none of it may stay.
    let base = || BatchWrite {
        judged: vec![(1, row(10, 0))],
        changes: vec![change(1, -1, Some(0))],
        inserted: vec![new(Uuid::new_v4())],
        released: vec![applied],
        recorded: vec![(Uuid::new_v4(), "order.created")],
        outbox: outbox(),
    };
    let cases: Vec<(BatchWrite<'_>, &str)> = vec![
        (
            BatchWrite {
                judged: vec![(1, row(10, 3))],
                ..base()
            },
            "a product moved since the batch was judged",
        ),
        (
            BatchWrite {
                judged: vec![],
                changes: vec![change(1, -11, Some(0))],
                ..base()
            },
            "a product's stock moved since it was read",
        ),
        (
            BatchWrite {
                inserted: vec![new(Uuid::new_v4()), new(existing)],
                ..base()
            },
            "another batch wrote a reservation of this order meanwhile",
        ),
        (
            BatchWrite {
                released: vec![applied, released],
                ..base()
            },
            "another batch released this order's stock meanwhile",
        ),
        (
            BatchWrite {
                recorded: vec![
                    (Uuid::new_v4(), "order.created"),
                    (recorded, "order.created"),
                ],
                ..base()
            },
            "a message was recorded by another consumer",
        ),
    ];
    for (write, why) in cases {
        let mut tx = db.pool.begin().await.expect("tx");
        let error = reservations::write_batch(&mut tx, &write)
            .await
            .expect_err(why);
        assert_contention(&error, why);
        tx.rollback().await.expect("rollback");
    }
    assert_eq!(stock_of(&db.pool, 1).await, (10, 0));
    assert_eq!(count(&db.pool, "reservations").await, 3);
    assert_eq!(count(&db.pool, "processed_messages").await, 1);
    assert_eq!(count(&db.pool, "outbox").await, 0);
    let mut conn = db.pool.acquire().await.expect("conn");
    let state = reservations::find(&mut conn, applied)
        .await
        .expect("find")
        .expect("row")
        .state;
    assert_eq!(state, "APPLIED");

    // The same batch with nothing moved goes in whole.
    let mut tx = db.pool.begin().await.expect("tx");
    reservations::write_batch(&mut tx, &base())
        .await
        .expect("write");
    tx.commit().await.expect("commit");
    assert_eq!(stock_of(&db.pool, 1).await, (9, 1));
    assert_eq!(count(&db.pool, "reservations").await, 4);
    assert_eq!(count(&db.pool, "outbox").await, 1);
}

// ---------------------------------------------------------------------------------------
// Products and restocks.

#[tokio::test]
async fn products_are_created_once_read_with_their_held_units_listed_and_restocked() {
    let db = database().await;
    let mut tx = db.pool.begin().await.expect("tx");
    let created = products::insert(&mut tx, 7, "Widget", 12)
        .await
        .expect("insert")
        .expect("created");
    tx.commit().await.expect("commit");
    assert_eq!(
        (
            created.product_id,
            created.name.as_str(),
            created.stock,
            created.held,
            created.version
        ),
        (7, "Widget", 12, 0, 0)
    );
    let mut tx = db.pool.begin().await.expect("tx");
    assert!(
        products::insert(&mut tx, 7, "Other", 1)
            .await
            .expect("insert")
            .is_none()
    );
    tx.commit().await.expect("commit");
    add_product(&db.pool, 3, 1).await;
    add_product(&db.pool, 9, 2).await;
    add_hold(&db.pool, "h1", "HELD", 60, &[(7, 2), (9, 1)]).await;
    add_hold(&db.pool, "h2", "HELD", 60, &[(7, 3)]).await;

    let mut conn = db.pool.acquire().await.expect("conn");
    let found = products::find(&mut conn, 7)
        .await
        .expect("find")
        .expect("a product");
    assert_eq!(
        (found.name.as_str(), found.stock, found.held),
        ("Widget", 12, 5)
    );
    assert_eq!(found.updated_at, created.updated_at);
    assert!(products::find(&mut conn, 8).await.expect("find").is_none());

    let page: Vec<(i64, i64)> = products::list(&mut conn, None, 2)
        .await
        .expect("list")
        .into_iter()
        .map(|p| (p.product_id, p.held))
        .collect();
    assert_eq!(page, [(3, 0), (7, 5)]);
    let page: Vec<i64> = products::list(&mut conn, Some(3), 10)
        .await
        .expect("list")
        .into_iter()
        .map(|p| p.product_id)
        .collect();
    assert_eq!(page, [7, 9]);

    let mut tx = db.pool.begin().await.expect("tx");
    let restocked = products::add_stock(&mut tx, 7, 8)
        .await
        .expect("restock")
        .expect("a product");
    tx.commit().await.expect("commit");
    assert_eq!(
        (restocked.stock, restocked.version, restocked.held),
        (20, 1, 5)
    );
    assert_eq!(stock_of(&db.pool, 7).await, (20, 1));
    let mut tx = db.pool.begin().await.expect("tx");
    assert!(
        products::add_stock(&mut tx, 8, 1)
            .await
            .expect("restock")
            .is_none()
    );
    tx.commit().await.expect("commit");
    assert_eq!(count(&db.pool, "products").await, 3);
}

#[tokio::test]
async fn a_restock_key_is_recorded_once_and_keys_are_compared_byte_for_byte() {
    let db = database().await;
    add_product(&db.pool, 1, 0).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    assert!(
        restocks::insert(&mut conn, 1, 5, Some("key"), b"first")
            .await
            .expect("insert")
    );
    assert!(
        !restocks::insert(&mut conn, 1, 6, Some("key"), b"second")
            .await
            .expect("insert")
    );
    assert!(
        restocks::insert(&mut conn, 1, 6, Some("KEY"), b"upper")
            .await
            .expect("insert")
    );
    assert!(
        restocks::insert(&mut conn, 1, 6, Some("key "), b"padded")
            .await
            .expect("insert")
    );
    // Restocks without a key never collide.
    assert!(
        restocks::insert(&mut conn, 1, 1, None, b"a")
            .await
            .expect("insert")
    );
    assert!(
        restocks::insert(&mut conn, 1, 1, None, b"b")
            .await
            .expect("insert")
    );
    assert_eq!(count(&db.pool, "restocks").await, 5);
    let stored = restocks::find_by_key(&mut conn, "key")
        .await
        .expect("find")
        .expect("stored");
    assert_eq!(
        stored,
        restocks::StoredRestock {
            product_id: 1,
            quantity: 5,
            response_body: b"first".to_vec()
        }
    );
    assert!(
        restocks::find_by_key(&mut conn, "Key")
            .await
            .expect("find")
            .is_none()
    );
    // Any other error stays an error: an unknown product.
    let error = restocks::insert(&mut conn, 2, 1, Some("other"), b"x")
        .await
        .expect_err("no such product");
    assert_eq!(
        error.as_database_error().map(|e| e.kind()),
        Some(sqlx::error::ErrorKind::ForeignKeyViolation)
    );
}

#[tokio::test]
async fn a_refused_check_is_told_by_its_constraint_name() {
    let db = database().await;
    add_product(&db.pool, 1, 0).await;
    let mut conn = db.pool.acquire().await.expect("conn");
    let error = products::insert(&mut conn, 2, "Widget", -1)
        .await
        .expect_err("negative stock");
    assert_eq!(
        violated_check(&error).as_deref(),
        Some("products_stock_non_negative")
    );
    let error = products::insert(&mut conn, 3, "", 1)
        .await
        .expect_err("no name");
    assert_eq!(
        violated_check(&error).as_deref(),
        Some("products_name_length")
    );
    let error = products::insert(&mut conn, -4, "Widget", 1)
        .await
        .expect_err("id");
    assert_eq!(
        violated_check(&error).as_deref(),
        Some("products_product_id_positive")
    );
    let error = restocks::insert(&mut conn, 1, 0, None, b"x")
        .await
        .expect_err("quantity");
    assert_eq!(
        violated_check(&error).as_deref(),
        Some("restocks_quantity_range")
    );
    assert_eq!(count(&db.pool, "products").await, 1);
    assert_eq!(count(&db.pool, "restocks").await, 0);
    // Not a CHECK: no name.
    let error = restocks::insert(&mut conn, 2, 1, None, b"x")
        .await
        .expect_err("fk");
    assert_eq!(violated_check(&error), None);
    assert_eq!(
        violated_check(&inventory_mysql::serialization_failure("x")),
        None
    );
}

// ---------------------------------------------------------------------------------------
// Plans: a write reads only the rows it writes, by key. A full scan (MariaDB's plan for a
// multi-table UPDATE on a small table) would lock every row, and wait here for the rows
// another transaction holds, past the 1 s lock wait.

#[tokio::test]
async fn no_write_waits_for_rows_it_does_not_touch() {
    let db = database().await;
    for id in 1..=4 {
        add_product(&db.pool, id, 10).await;
    }
    add_hold(&db.pool, "mine", "HELD", 60, &[(1, 1)]).await;
    add_hold(&db.pool, "mine-too", "HELD", 60, &[(1, 1)]).await;
    add_hold(&db.pool, "theirs", "HELD", 60, &[(2, 1)]).await;
    add_hold(&db.pool, "due", "HELD", -5, &[(1, 1)]).await;
    let (order, other_order) = (Uuid::new_v4(), Uuid::new_v4());
    add_reservation(&db.pool, order, "APPLIED", &[(1, 1)]).await;
    add_reservation(&db.pool, other_order, "APPLIED", &[(2, 1)]).await;
    // Another transaction holds product 2, its hold, its units and its order.
    let mut other = db.pool.begin().await.expect("tx");
    for sql in [
        "SELECT * FROM products WHERE product_id IN (2, 3) FOR UPDATE",
        "SELECT * FROM holds WHERE hold_id = 'theirs' FOR UPDATE",
        "SELECT * FROM held_units WHERE hold_id = 'theirs' FOR UPDATE",
    ] {
        sqlx::query(sql).fetch_all(&mut *other).await.expect("lock");
    }
    sqlx::query("SELECT * FROM reservations WHERE order_id = ? FOR UPDATE")
        .bind(other_order)
        .fetch_all(&mut *other)
        .await
        .expect("lock");

    let started = Instant::now();
    let items = items_of(&[(1, 1)]);
    let new = Outcomes {
        deductions: vec![sale("d", &items, b"b")],
        confirms: vec!["mine"],
        ..Outcomes::default()
    };
    record_ok(
        &db.pool,
        &[(1, row(10, 0))],
        &[change(1, -1, Some(0))],
        &new,
    )
    .await;
    let write = BatchWrite {
        judged: vec![(1, row(9, 1))],
        changes: vec![change(1, -1, Some(1))],
        released: vec![order],
        ..BatchWrite::default()
    };
    let mut tx = db.pool.begin().await.expect("tx");
    reservations::write_batch(&mut tx, &write)
        .await
        .expect("write");
    holds::cancel_all(&mut tx, &["mine-too"])
        .await
        .expect("cancel");
    holds::confirm_all(&mut tx, &["mine"])
        .await
        .expect("confirm");
    holds::expire_due(&mut tx, 10).await.expect("expire");
    products::add_stock(&mut tx, 4, 1).await.expect("restock");
    tx.commit().await.expect("commit");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "nothing waited for the other transaction"
    );
    other.rollback().await.expect("rollback");
    // 10 - 1 (deduction) - 1 (reservation) + 1 (cancel) + 1 (expiry)
    assert_eq!(stock_of(&db.pool, 1).await.0, 10);
    assert_eq!(hold_state(&db.pool, "theirs").await.0, "HELD");
}

#[tokio::test]
async fn a_product_named_twice_in_a_hold_keeps_its_first_units_row() {
    let db = database().await;
    add_product(&db.pool, 1, 10).await;
    let items = items_of(&[(1, 2)]);
    let units = [
        Unit {
            product_id: 1,
            quantity: 2,
        },
        Unit {
            product_id: 1,
            quantity: 5,
        },
    ];
    let created = now_micros();
    let new = Outcomes {
        holds: vec![NewHold {
            hold_id: "twice",
            fingerprint: "fp",
            items: &items,
            rejection_reason: None,
            response_status: 201,
            response_body: b"held",
            held: Some(&units),
            created_at: created,
            expires_at: created + TimeDelta::seconds(60),
        }],
        ..Outcomes::default()
    };
    record_ok(&db.pool, &[], &[change(1, -2, Some(0))], &new).await;
    assert_eq!(units_of(&db.pool, "twice").await, vec![(1, 2)]);
    // The skip is for duplicates only: a unit the CHECK refuses fails the batch.
    let bad = [Unit {
        product_id: 1,
        quantity: 0,
    }];
    let new = Outcomes {
        holds: vec![NewHold {
            hold_id: "bad",
            held: Some(&bad),
            ..new.holds[0]
        }],
        ..Outcomes::default()
    };
    let error = record_err(&db.pool, &[], &[change(1, 0, Some(1))], &new).await;
    assert_eq!(
        violated_check(&error).as_deref(),
        Some("held_units_quantity_positive")
    );
    assert_eq!(count(&db.pool, "holds").await, 1);
}

/// Whether another session can lock `sql`'s rows without waiting (`NOWAIT`).
async fn lockable(pool: &MySqlPool, sql: &str) -> bool {
    let mut tx = pool.begin().await.expect("tx");
    let locked = sqlx::query(sqlx::AssertSqlSafe(format!("{sql} FOR UPDATE NOWAIT")))
        .execute(&mut *tx)
        .await;
    locked.is_ok()
}

#[tokio::test]
async fn the_read_locks_the_batch_s_products_and_nothing_else_until_its_transaction_ends() {
    let db = database().await;
    add_product(&db.pool, 1, 5).await;
    add_product(&db.pool, 2, 5).await;
    sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, response_status, \
         response_body) VALUES ('sale-1', 'f', '[]', 'APPLIED', 200, '')",
    )
    .execute(&db.pool)
    .await
    .expect("a stored deduction");

    let mut tx = db.pool.begin().await.expect("tx");
    let read = deductions::read(&mut tx, &[1], &["sale-1"], &[])
        .await
        .expect("read");
    assert_eq!((read.stock.len(), read.stored.len()), (1, 1));
    let product = "SELECT product_id FROM products WHERE product_id";
    assert!(
        !lockable(&db.pool, &format!("{product} = 1")).await,
        "the batch's product"
    );
    assert!(
        lockable(&db.pool, &format!("{product} = 2")).await,
        "another product"
    );
    assert!(
        lockable(
            &db.pool,
            "SELECT deduction_id FROM deductions WHERE deduction_id = 'sale-1'"
        )
        .await,
        "a stored id it read: a replay locks nothing of it"
    );
    tx.rollback().await.expect("rollback");
    assert!(
        lockable(&db.pool, &format!("{product} = 1")).await,
        "released with the transaction"
    );
}
