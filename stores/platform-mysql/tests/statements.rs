//! The statements against the machine's MariaDB (or MySQL), each test in a database of its
//! own, `t_platform_mysql_<uuid>`, built from the orders migrations and dropped at the end;
//! sessions set up as platform's pool sets them (`platform::storage::mysql`).
//!
//! The server is `TEST_MYSQL_SERVER` (default `mysql://root@127.0.0.1:3306`). What the tests
//! arrange and inspect is plain `sqlx::query`: only the crate's own statements are checked.

use std::time::{Duration, Instant};

use platform_mysql::{MAX_ERROR_BYTES, admin, inbox, outbox};
use sqlx::MySqlPool;
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/order-service/mysql");

const NO_AGE: Duration = Duration::ZERO;
const HOUR: Duration = Duration::from_secs(3600);

/// A database of its own for one test, built from the migrations as a service builds its
/// own (sessions included), dropped with its guard.
async fn database() -> TestMySqlDatabase {
    TestMySqlDatabase::create("platform_mysql", &ORDERS).await
}

/// Writes one row per payload, in one statement; their ids, in order.
async fn write(pool: &MySqlPool, payloads: &[serde_json::Value]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = payloads.iter().map(|_| Uuid::new_v4()).collect();
    write_ids(pool, &ids, payloads).await;
    ids
}

async fn write_ids(pool: &MySqlPool, ids: &[Uuid], payloads: &[serde_json::Value]) {
    let headers = serde_json::json!({ "traceparent": "00-abc-01" });
    let rows: Vec<outbox::NewRow<'_>> = ids
        .iter()
        .zip(payloads)
        .map(|(id, payload)| outbox::NewRow {
            event_id: *id,
            exchange: "orders.events",
            routing_key: "order.cancelled",
            payload,
            headers: &headers,
        })
        .collect();
    let mut conn = pool.acquire().await.expect("connection");
    outbox::insert(&mut conn, &rows).await.expect("insert");
}

fn empties(count: usize) -> Vec<serde_json::Value> {
    vec![serde_json::json!({}); count]
}

async fn status_of(pool: &MySqlPool, id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM outbox WHERE event_id = ?")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("status")
}

/// Ages every outbox row of `ids`: written and due `by` ago.
async fn age_rows(pool: &MySqlPool, ids: &[Uuid], by: Duration) {
    for id in ids {
        sqlx::query(
            "UPDATE outbox SET created_at = created_at - INTERVAL ? SECOND,
                    next_attempt_at = next_attempt_at - INTERVAL ? SECOND
             WHERE event_id = ?",
        )
        .bind(by.as_secs())
        .bind(by.as_secs())
        .bind(id)
        .execute(pool)
        .await
        .expect("age");
    }
}

async fn claim_all(pool: &MySqlPool, min_age: Duration) -> Vec<Uuid> {
    let mut tx = pool.begin().await.expect("tx");
    let rows = outbox::claim(&mut tx, 1000, min_age).await.expect("claim");
    tx.commit().await.expect("commit");
    rows.into_iter().map(|row| row.event_id).collect()
}

#[tokio::test]
async fn insert_keeps_the_order_and_round_trips_ids_and_json_exactly() {
    let db = database().await;
    let payloads: Vec<serde_json::Value> = (0..60)
        .map(|n| {
            serde_json::json!({
                "n": n,
                "text": "naïve \"quoted\" \\ back\u{0}slash \n tab\t \u{1F600} ' `",
                "amount": "12.30",
                "big": u64::MAX,
                "negative": i64::MIN,
                "float": 0.1,
                "nested": { "list": [1, [2, {}], null, true], "empty": [] },
                "unicode_key_é": null,
            })
        })
        .collect();
    // Ids that do not sort in the order written: the table's order must be the input's.
    let ids: Vec<Uuid> = (0..payloads.len())
        .map(|n| Uuid::from_u128(u128::MAX - n as u128 * 7919))
        .collect();
    let headers: Vec<serde_json::Value> = (0..payloads.len())
        .map(|n| match n % 3 {
            0 => serde_json::json!({ "traceparent": format!("00-{n:032x}-01") }),
            1 => serde_json::json!({}),
            _ => serde_json::json!({ "a": "ü", "b": ["x"] }),
        })
        .collect();
    let rows: Vec<outbox::NewRow<'_>> = (0..payloads.len())
        .map(|n| outbox::NewRow {
            event_id: ids[n],
            exchange: if n % 2 == 0 {
                "orders.events"
            } else {
                "ïnv \"x\" \u{1F600}"
            },
            routing_key: "order.cancelled",
            payload: &payloads[n],
            headers: &headers[n],
        })
        .collect();
    let mut conn = db.pool.acquire().await.expect("connection");
    outbox::insert(&mut conn, &[]).await.expect("no rows");
    outbox::insert(&mut conn, &rows).await.expect("insert");

    let stored: Vec<(i64, Vec<u8>)> = sqlx::query_as("SELECT id, event_id FROM outbox ORDER BY id")
        .fetch_all(&mut *conn)
        .await
        .expect("rows");
    let stored_ids: Vec<Uuid> = stored
        .iter()
        .map(|(_, bytes)| Uuid::from_slice(bytes).expect("16 bytes"))
        .collect();
    assert_eq!(
        stored_ids, ids,
        "ids ascend in the order given, bytes as given"
    );

    let claimed = outbox::claim(&mut conn, 1000, NO_AGE).await.expect("claim");
    assert_eq!(claimed.len(), rows.len());
    for (row, new) in claimed.iter().zip(&rows) {
        assert_eq!(row.event_id, new.event_id);
        assert_eq!(row.exchange, new.exchange);
        assert_eq!(row.routing_key, new.routing_key);
        assert_eq!(&row.payload, new.payload);
        assert_eq!(&row.headers, new.headers);
        assert_eq!(row.attempts, 0);
    }
    let listed = admin::list(&db.pool, "pending", 0, 1000)
        .await
        .expect("list");
    assert_eq!(listed.len(), rows.len());
    assert_eq!(&listed[7].payload, rows[7].payload);
    assert_eq!(listed[7].event_id, ids[7]);
    assert_eq!(listed[7].sent_at, None);
    assert_eq!(listed[7].last_error, None);
}

#[tokio::test]
async fn a_claim_skips_rows_another_transaction_holds_without_waiting() {
    let db = database().await;
    let ids = write(&db.pool, &empties(10)).await;

    let mut first = db.pool.begin().await.expect("tx");
    let a = outbox::claim(&mut first, 4, NO_AGE).await.expect("claim");
    let started = Instant::now();
    let mut second = db.pool.begin().await.expect("tx");
    // innodb_lock_wait_timeout is 1 s: a claim that waited for a lock would fail.
    let b = outbox::claim(&mut second, 100, NO_AGE)
        .await
        .expect("the second claim does not wait");
    assert!(started.elapsed() < Duration::from_millis(900));
    let mut third = db.pool.begin().await.expect("tx");
    let c = outbox::claim(&mut third, 100, NO_AGE).await.expect("claim");

    let a: Vec<Uuid> = a.into_iter().map(|row| row.event_id).collect();
    let b: Vec<Uuid> = b.into_iter().map(|row| row.event_id).collect();
    assert_eq!(
        a,
        ids[..4],
        "the first claim takes the first four, in order"
    );
    assert_eq!(
        b,
        ids[4..],
        "the second takes the rest, none of the first's"
    );
    assert!(c.is_empty(), "every row is held");

    first.rollback().await.expect("rollback");
    third.rollback().await.expect("rollback");
    let mut fourth = db.pool.begin().await.expect("tx");
    let d: Vec<Uuid> = outbox::claim(&mut fourth, 100, NO_AGE)
        .await
        .expect("claim")
        .into_iter()
        .map(|row| row.event_id)
        .collect();
    assert_eq!(d, ids[..4], "released rows can be claimed again");
    fourth.commit().await.expect("commit");
    second.commit().await.expect("commit");
}

#[tokio::test]
async fn a_claim_takes_due_rows_tried_before_or_old_enough_earliest_due_first() {
    let db = database().await;
    let ids = write(&db.pool, &empties(5)).await;

    // Never tried and young: not due for a sweep that waits an hour.
    assert!(outbox::any_due(&db.pool, NO_AGE).await.expect("any"));
    assert!(!outbox::any_due(&db.pool, HOUR).await.expect("any"));
    assert!(claim_all(&db.pool, HOUR).await.is_empty());

    // Tried before and due: taken whatever its age.
    outbox::record_failure(&db.pool, ids[3], 1, "nack", NO_AGE, false)
        .await
        .expect("failure");
    assert!(outbox::any_due(&db.pool, HOUR).await.expect("any"));
    assert_eq!(claim_all(&db.pool, HOUR).await, [ids[3]]);

    // Tried before and not yet due: left alone even by a sweep that takes everything due.
    outbox::record_failure(&db.pool, ids[3], 2, "nack", HOUR, false)
        .await
        .expect("failure");
    assert!(!outbox::any_due(&db.pool, HOUR).await.expect("any"));
    assert_eq!(
        claim_all(&db.pool, NO_AGE).await,
        [ids[0], ids[1], ids[2], ids[4]]
    );

    // Old enough: taken though never tried, and the earliest due comes first.
    age_rows(&db.pool, &[ids[4]], 2 * HOUR).await;
    age_rows(&db.pool, &[ids[1]], HOUR + Duration::from_secs(60)).await;
    assert!(outbox::any_due(&db.pool, HOUR).await.expect("any"));
    assert_eq!(claim_all(&db.pool, HOUR).await, [ids[4], ids[1]]);
    assert_eq!(
        claim_all(&db.pool, NO_AGE).await,
        [ids[4], ids[1], ids[0], ids[2]]
    );

    // Neither a dead nor a sent row is ever due.
    outbox::record_failure(&db.pool, ids[4], 10, "dead", NO_AGE, true)
        .await
        .expect("failure");
    outbox::mark_sent(&db.pool, &[ids[1]]).await.expect("mark");
    assert_eq!(claim_all(&db.pool, NO_AGE).await, [ids[0], ids[2]]);
    assert!(!outbox::any_due(&db.pool, HOUR).await.expect("any"));
}

#[tokio::test]
async fn mark_sent_marks_only_pending_rows_and_counts_them() {
    let db = database().await;
    let ids = write(&db.pool, &empties(4)).await;
    outbox::record_failure(&db.pool, ids[2], 10, "unroutable", NO_AGE, true)
        .await
        .expect("failure");

    assert_eq!(outbox::mark_sent(&db.pool, &[]).await.expect("mark"), 0);
    let unknown = Uuid::new_v4();
    let marked = outbox::mark_sent(&db.pool, &[ids[0], ids[1], ids[2], unknown, ids[0]])
        .await
        .expect("mark");
    assert_eq!(marked, 2, "the pending rows of the ids, each once");
    assert_eq!(status_of(&db.pool, ids[0]).await, "sent");
    assert_eq!(status_of(&db.pool, ids[1]).await, "sent");
    assert_eq!(
        status_of(&db.pool, ids[2]).await,
        "dead",
        "a dead row stays dead"
    );
    assert_eq!(status_of(&db.pool, ids[3]).await, "pending", "not asked");
    let sent_at: Vec<Option<chrono::DateTime<chrono::Utc>>> =
        sqlx::query_scalar("SELECT sent_at FROM outbox ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .expect("sent_at");
    assert!(sent_at[0].is_some() && sent_at[1].is_some());
    assert!(sent_at[2].is_none() && sent_at[3].is_none());

    assert_eq!(
        outbox::mark_sent(&db.pool, &ids).await.expect("mark"),
        1,
        "rows already sent are not matched again"
    );
    // A failure recorded after the row was sent changes nothing.
    outbox::record_failure(&db.pool, ids[0], 1, "late", NO_AGE, false)
        .await
        .expect("failure");
    assert_eq!(status_of(&db.pool, ids[0]).await, "sent");
}

#[tokio::test]
async fn record_failure_sets_pending_or_dead_and_cuts_a_long_error() {
    let db = database().await;
    let ids = write(&db.pool, &empties(3)).await;

    outbox::record_failure(&db.pool, ids[0], 3, "boom", Duration::from_secs(30), false)
        .await
        .expect("failure");
    let (status, attempts, error, due_in): (String, i32, Option<String>, i64) = sqlx::query_as(
        "SELECT status, attempts, last_error,
                TIMESTAMPDIFF(MICROSECOND, NOW(6), next_attempt_at)
         FROM outbox WHERE event_id = ?",
    )
    .bind(ids[0])
    .fetch_one(&db.pool)
    .await
    .expect("row");
    assert_eq!(
        (status.as_str(), attempts, error.as_deref()),
        ("pending", 3, Some("boom"))
    );
    assert!(
        (25_000_000..=30_000_000).contains(&due_in),
        "due in 30 s: {due_in} µs"
    );
    assert_eq!(
        status_of(&db.pool, ids[1]).await,
        "pending",
        "only that row"
    );

    outbox::record_failure(&db.pool, ids[0], 4, "gone", NO_AGE, true)
        .await
        .expect("failure");
    assert_eq!(status_of(&db.pool, ids[0]).await, "dead");
    // A dead row is no longer the relay's: a late failure leaves it as it is.
    outbox::record_failure(&db.pool, ids[0], 5, "late", NO_AGE, false)
        .await
        .expect("failure");
    let (status, attempts, error): (String, i32, Option<String>) =
        sqlx::query_as("SELECT status, attempts, last_error FROM outbox WHERE event_id = ?")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .expect("row");
    assert_eq!(
        (status.as_str(), attempts, error.as_deref()),
        ("dead", 4, Some("gone"))
    );

    // Far longer than TEXT holds, in characters of 1 to 4 bytes: cut, not refused.
    let long: String = "aé€😀".repeat(20_000);
    outbox::record_failure(&db.pool, ids[2], 1, &long, NO_AGE, false)
        .await
        .expect("a long error is cut, not an error");
    let kept: String = sqlx::query_scalar("SELECT last_error FROM outbox WHERE event_id = ?")
        .bind(ids[2])
        .fetch_one(&db.pool)
        .await
        .expect("error");
    assert!(kept.len() <= MAX_ERROR_BYTES && kept.len() > MAX_ERROR_BYTES - 4);
    assert!(
        long.starts_with(&kept),
        "a prefix, cut at a character boundary"
    );
}

#[tokio::test]
async fn count_failures_counts_each_id_once_per_call_across_calls() {
    let db = database().await;
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());

    assert!(
        inbox::count_failures(&db.pool, &[])
            .await
            .expect("none")
            .is_empty()
    );
    let first = inbox::count_failures(&db.pool, &[(a, "one"), (b, "one"), (a, "again")])
        .await
        .expect("count");
    assert_eq!(first, [(a, 1), (b, 1)], "an id given twice counts once");
    let error: String =
        sqlx::query_scalar("SELECT last_error FROM message_failures WHERE message_id = ?")
            .bind(a)
            .fetch_one(&db.pool)
            .await
            .expect("error");
    assert_eq!(error, "one", "the first error of a repeated id is kept");

    let mut conn = db.pool.acquire().await.expect("connection");
    let second = inbox::count_failures(&mut *conn, &[(c, "new"), (a, "two \u{1F600}")])
        .await
        .expect("count");
    assert_eq!(second, [(c, 1), (a, 2)], "in the order given");
    let third = inbox::count_failures(&mut *conn, &[(a, "three"), (b, "two")])
        .await
        .expect("count");
    assert_eq!(third, [(a, 3), (b, 2)]);

    let stored: Vec<(Vec<u8>, i32, String)> = sqlx::query_as(
        "SELECT message_id, failures, last_error FROM message_failures ORDER BY failures, message_id",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("rows");
    let stored: Vec<(Uuid, i32, String)> = stored
        .into_iter()
        .map(|(id, n, e)| (Uuid::from_slice(&id).expect("16 bytes"), n, e))
        .collect();
    assert!(stored.contains(&(a, 3, "three".to_owned())));
    assert!(stored.contains(&(b, 2, "two".to_owned())));
    assert!(stored.contains(&(c, 1, "new".to_owned())));
    assert_eq!(stored.len(), 3);

    let long = "€".repeat(40_000);
    let counted = inbox::count_failures(&mut *conn, &[(c, long.as_str())])
        .await
        .expect("a long error is cut, not an error");
    assert_eq!(counted, [(c, 2)]);
    let kept: String =
        sqlx::query_scalar("SELECT last_error FROM message_failures WHERE message_id = ?")
            .bind(c)
            .fetch_one(&mut *conn)
            .await
            .expect("error");
    assert!(kept.len() <= MAX_ERROR_BYTES && long.starts_with(&kept));
}

#[tokio::test]
async fn retention_deletes_only_old_rows_oldest_first_and_at_most_a_batch() {
    let db = database().await;

    // Outbox: five sent long ago (at different times), one sent now, one pending and one
    // dead, both old.
    let ids = write(&db.pool, &empties(8)).await;
    outbox::mark_sent(&db.pool, &ids[..6]).await.expect("mark");
    outbox::record_failure(&db.pool, ids[7], 10, "dead", NO_AGE, true)
        .await
        .expect("failure");
    for (n, id) in ids[..5].iter().enumerate() {
        sqlx::query("UPDATE outbox SET sent_at = NOW(6) - INTERVAL ? MINUTE WHERE event_id = ?")
            .bind(61 + 10 * (5 - n as i64))
            .bind(id)
            .execute(&db.pool)
            .await
            .expect("age");
    }
    age_rows(&db.pool, &ids[6..], 10 * HOUR).await;

    assert_eq!(
        outbox::delete_sent_before(&db.pool, HOUR, 3)
            .await
            .expect("delete"),
        3
    );
    let left: Vec<Vec<u8>> = sqlx::query_scalar("SELECT event_id FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .expect("rows");
    let left: Vec<Uuid> = left
        .iter()
        .map(|b| Uuid::from_slice(b).expect("id"))
        .collect();
    assert_eq!(
        left,
        [ids[3], ids[4], ids[5], ids[6], ids[7]],
        "the oldest sent first"
    );
    assert_eq!(
        outbox::delete_sent_before(&db.pool, HOUR, 3)
            .await
            .expect("delete"),
        2
    );
    assert_eq!(
        outbox::delete_sent_before(&db.pool, HOUR, 3)
            .await
            .expect("delete"),
        0
    );
    assert_eq!(
        status_of(&db.pool, ids[5]).await,
        "sent",
        "sent recently: kept"
    );
    assert_eq!(
        status_of(&db.pool, ids[6]).await,
        "pending",
        "old but pending: kept"
    );
    assert_eq!(
        status_of(&db.pool, ids[7]).await,
        "dead",
        "old but dead: kept"
    );

    // Processed message ids: three old, one recent.
    for minutes in [300, 200, 100, 0] {
        sqlx::query(
            "INSERT INTO processed_messages (message_id, kind, processed_at)
             VALUES (?, 'k', NOW(6) - INTERVAL ? MINUTE)",
        )
        .bind(Uuid::new_v4())
        .bind(minutes)
        .execute(&db.pool)
        .await
        .expect("processed");
    }
    assert_eq!(
        inbox::delete_processed_before(&db.pool, HOUR, 2)
            .await
            .expect("delete"),
        2
    );
    let oldest: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MINUTE, MIN(processed_at), NOW(6)) FROM processed_messages",
    )
    .fetch_one(&db.pool)
    .await
    .expect("oldest");
    assert_eq!(oldest, 100, "the two oldest went first");
    assert_eq!(
        inbox::delete_processed_before(&db.pool, HOUR, 2)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        inbox::delete_processed_before(&db.pool, HOUR, 2)
            .await
            .expect("delete"),
        0
    );

    // Failure counts: two untouched for long, one recent.
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    inbox::count_failures(&db.pool, &[(a, "e"), (b, "e"), (c, "e")])
        .await
        .expect("count");
    for id in [a, b] {
        sqlx::query(
            "UPDATE message_failures SET updated_at = NOW(6) - INTERVAL 2 HOUR WHERE message_id = ?",
        )
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("age");
    }
    assert_eq!(
        inbox::delete_failures_before(&db.pool, HOUR, 1)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        inbox::delete_failures_before(&db.pool, HOUR, 5)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        inbox::delete_failures_before(&db.pool, HOUR, 5)
            .await
            .expect("delete"),
        0
    );
    let left: Vec<Vec<u8>> = sqlx::query_scalar("SELECT message_id FROM message_failures")
        .fetch_all(&db.pool)
        .await
        .expect("rows");
    assert_eq!(left, [c.as_bytes().to_vec()]);
}

#[tokio::test]
async fn the_backlog_counts_pending_rows_and_the_oldest_ones_age() {
    let db = database().await;
    let empty = outbox::backlog(&db.pool).await.expect("backlog");
    assert_eq!(
        empty,
        outbox::Backlog {
            pending: 0,
            oldest_secs: 0.0
        }
    );

    let ids = write(&db.pool, &empties(5)).await;
    outbox::mark_sent(&db.pool, &ids[..1]).await.expect("mark");
    outbox::record_failure(&db.pool, ids[1], 10, "dead", NO_AGE, true)
        .await
        .expect("failure");
    age_rows(&db.pool, &ids[..2], 10 * HOUR).await;
    age_rows(&db.pool, &ids[3..4], Duration::from_secs(90)).await;
    let backlog = outbox::backlog(&db.pool).await.expect("backlog");
    assert_eq!(backlog.pending, 3, "neither sent nor dead rows");
    assert!(
        (90.0..100.0).contains(&backlog.oldest_secs),
        "the oldest pending row: {}",
        backlog.oldest_secs
    );
}

#[tokio::test]
async fn admin_lists_by_status_and_retry_makes_a_dead_row_pending() {
    let db = database().await;
    admin::ping(&db.pool).await.expect("ping");
    assert!(inbox::answers(&db.pool).await);

    let ids = write(
        &db.pool,
        &[
            serde_json::json!({ "order": 1 }),
            serde_json::json!({}),
            serde_json::json!({}),
        ],
    )
    .await;
    // Dead, and not due for an hour: a retry makes it due now.
    outbox::record_failure(&db.pool, ids[0], 10, "unroutable", HOUR, true)
        .await
        .expect("failure");
    outbox::record_failure(&db.pool, ids[2], 10, "unroutable", NO_AGE, true)
        .await
        .expect("failure");

    let dead = admin::list(&db.pool, "dead", 0, 10).await.expect("list");
    assert_eq!(
        dead.iter().map(|e| e.event_id).collect::<Vec<_>>(),
        [ids[0], ids[2]]
    );
    assert_eq!(dead[0].status, "dead");
    assert_eq!(dead[0].attempts, 10);
    assert_eq!(dead[0].last_error.as_deref(), Some("unroutable"));
    assert_eq!(dead[0].payload, serde_json::json!({ "order": 1 }));
    assert_eq!(dead[0].exchange, "orders.events");
    assert!(dead[0].created_at <= chrono::Utc::now() + chrono::Duration::seconds(5));
    let page = admin::list(&db.pool, "dead", dead[0].id, 1)
        .await
        .expect("list");
    assert_eq!(
        page.iter().map(|e| e.event_id).collect::<Vec<_>>(),
        [ids[2]]
    );
    assert!(
        admin::list(&db.pool, "DEAD", 0, 10)
            .await
            .expect("list")
            .is_empty(),
        "compared byte by byte"
    );
    assert_eq!(
        admin::list(&db.pool, "pending", 0, 10)
            .await
            .expect("list")
            .len(),
        1
    );

    let missing = dead[1].id + 1000;
    assert_eq!(admin::retry(&db.pool, missing).await.expect("retry"), None);

    let revived = admin::retry(&db.pool, dead[0].id)
        .await
        .expect("retry")
        .expect("the row");
    assert_eq!(revived.id, dead[0].id);
    assert_eq!(revived.event_id, ids[0]);
    assert_eq!(revived.status, "pending");
    assert_eq!(revived.attempts, 0);
    assert_eq!(revived.last_error, None);
    assert_eq!(revived.payload, serde_json::json!({ "order": 1 }));
    assert_eq!(status_of(&db.pool, ids[0]).await, "pending", "committed");
    // Due now, with a fresh budget (never tried: a sweep takes it once it is old enough, as
    // on PostgreSQL; the operator's wake does not wait for that).
    assert_eq!(claim_all(&db.pool, NO_AGE).await, [ids[1], ids[0]]);
    assert!(claim_all(&db.pool, HOUR).await.is_empty());

    // Inside a caller's transaction the retry is a savepoint: rolled back with it.
    let mut tx = db.pool.begin().await.expect("tx");
    let inside = admin::retry(&mut *tx, dead[1].id)
        .await
        .expect("retry")
        .expect("row");
    assert_eq!(inside.status, "pending");
    tx.rollback().await.expect("rollback");
    assert_eq!(status_of(&db.pool, ids[2]).await, "dead");
}

#[tokio::test]
async fn ids_differing_only_in_letter_case_or_padding_bytes_stay_distinct() {
    let db = database().await;
    // Bytes a case-insensitive or PAD SPACE text comparison would take for one value: 'A'
    // and 'a', trailing ' ' and trailing NUL.
    let upper = Uuid::from_bytes(*b"AAAAAAAAAAAAAAAA");
    let lower = Uuid::from_bytes(*b"aaaaaaaaaaaaaaaa");
    let space = Uuid::from_bytes(*b"AAAAAAAAAAAAAAA ");
    let nul = Uuid::from_bytes(*b"AAAAAAAAAAAAAAA\0");
    let ids = [upper, lower, space, nul];
    write_ids(&db.pool, &ids, &empties(4)).await;
    assert_eq!(
        claim_all(&db.pool, NO_AGE).await,
        ids,
        "four rows, bytes as given"
    );

    assert_eq!(
        outbox::mark_sent(&db.pool, &[upper, space])
            .await
            .expect("mark"),
        2
    );
    assert_eq!(status_of(&db.pool, upper).await, "sent");
    assert_eq!(status_of(&db.pool, lower).await, "pending");
    assert_eq!(status_of(&db.pool, space).await, "sent");
    assert_eq!(status_of(&db.pool, nul).await, "pending");

    outbox::record_failure(&db.pool, lower, 10, "dead", NO_AGE, true)
        .await
        .expect("failure");
    assert_eq!(status_of(&db.pool, lower).await, "dead");
    assert_eq!(status_of(&db.pool, nul).await, "pending");

    let counted = inbox::count_failures(&db.pool, &[(upper, "u"), (lower, "l"), (nul, "n")])
        .await
        .expect("count");
    assert_eq!(counted, [(upper, 1), (lower, 1), (nul, 1)]);
    let counted = inbox::count_failures(&db.pool, &[(lower, "l"), (space, "s")])
        .await
        .expect("count");
    assert_eq!(counted, [(lower, 2), (space, 1)]);
}
