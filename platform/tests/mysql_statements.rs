//! docs/database-backends.md: platform's statements on MySQL / MariaDB (`platform-mysql`)
//! do what their PostgreSQL forms do, through MySQL's traps: no array parameters, rows
//! affected counted as matched, no `UPDATE … RETURNING`, `TEXT`'s 64 KiB. Against the
//! machine's MariaDB, a database per test.

use std::time::Duration;

use platform::storage::mysql::MySqlStore;
use platform_mysql::{admin, inbox, outbox};
use sqlx::MySqlPool;
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/order-service/mysql");

const NO_AGE: Duration = Duration::ZERO;

async fn database(prefix: &str) -> TestMySqlDatabase {
    TestMySqlDatabase::create(prefix, &ORDERS).await
}

/// Writes one row per payload; their ids, in order.
async fn write(pool: &MySqlPool, payloads: &[serde_json::Value]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = payloads.iter().map(|_| Uuid::now_v7()).collect();
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
    ids
}

async fn status_of(pool: &MySqlPool, id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM outbox WHERE event_id = ?")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("status")
}

#[tokio::test]
async fn rows_are_written_in_order_and_read_back_exactly() {
    let db = database("my_stmt_insert").await;
    let payloads: Vec<_> = (0..50)
        .map(|n| serde_json::json!({ "n": n, "text": "naïve \"quoted\" \\ \u{1F600}", "amount": "12.30" }))
        .collect();
    let ids = write(&db.pool, &payloads).await;
    let mut tx = db.pool.begin().await.expect("tx");
    let claimed = outbox::claim(&mut tx, 100, NO_AGE).await.expect("claim");
    tx.commit().await.expect("commit");
    let read: Vec<Uuid> = claimed.iter().map(|r| r.event_id).collect();
    assert_eq!(read, ids, "the ids' order is the order written");
    for (row, payload) in claimed.iter().zip(&payloads) {
        assert_eq!(&row.payload, payload);
        assert_eq!(row.headers["traceparent"], "00-abc-01");
        assert_eq!(row.attempts, 0);
    }
}

#[tokio::test]
async fn a_claim_skips_rows_another_relay_holds_and_rows_not_yet_due() {
    let db = database("my_stmt_claim").await;
    let ids = write(&db.pool, &vec![serde_json::json!({}); 10]).await;
    assert!(outbox::any_due(&db.pool, NO_AGE).await.expect("any"));
    assert!(
        !outbox::any_due(&db.pool, Duration::from_secs(3600))
            .await
            .expect("any"),
        "rows never tried are not due before they are old enough"
    );
    let mut first = db.pool.begin().await.expect("tx");
    let mut second = db.pool.begin().await.expect("tx");
    let a = outbox::claim(&mut first, 4, NO_AGE).await.expect("claim");
    // Does not wait for `first`'s locks: skips them.
    let b = outbox::claim(&mut second, 100, NO_AGE)
        .await
        .expect("claim");
    assert_eq!(a.len(), 4);
    assert_eq!(b.len(), 6);
    let mut all: Vec<Uuid> = a.iter().chain(&b).map(|r| r.event_id).collect();
    all.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(all, expected, "every row claimed once");
    first.rollback().await.expect("rollback");
    second.rollback().await.expect("rollback");

    // A failed row waits for its delay.
    outbox::record_failure(
        &db.pool,
        ids[0],
        1,
        "nacked",
        Duration::from_secs(3600),
        false,
    )
    .await
    .expect("failure");
    let mut tx = db.pool.begin().await.expect("tx");
    let due = outbox::claim(&mut tx, 100, NO_AGE).await.expect("claim");
    tx.rollback().await.expect("rollback");
    assert!(due.iter().all(|r| r.event_id != ids[0]));
    assert_eq!(due.len(), 9);
}

#[tokio::test]
async fn marks_touch_pending_rows_only_and_failures_count_down_to_dead() {
    let db = database("my_stmt_mark").await;
    let ids = write(&db.pool, &vec![serde_json::json!({}); 3]).await;
    let long_error = "x".repeat(100_000);
    outbox::record_failure(&db.pool, ids[2], 10, &long_error, Duration::ZERO, true)
        .await
        .expect("a long error is cut, not refused");
    assert_eq!(status_of(&db.pool, ids[2]).await, "dead");
    let kept: i64 = sqlx::query_scalar("SELECT LENGTH(last_error) FROM outbox WHERE event_id = ?")
        .bind(ids[2])
        .fetch_one(&db.pool)
        .await
        .expect("length");
    assert_eq!(kept, platform_mysql::MAX_ERROR_BYTES as i64);

    let marked = outbox::mark_sent(&db.pool, &ids).await.expect("mark");
    assert_eq!(marked, 2, "the dead row is left as it is");
    assert_eq!(status_of(&db.pool, ids[0]).await, "sent");
    assert_eq!(status_of(&db.pool, ids[2]).await, "dead");
    // A second mark finds nothing pending, and a failure of a sent row changes nothing.
    assert_eq!(outbox::mark_sent(&db.pool, &ids).await.expect("mark"), 0);
    outbox::record_failure(&db.pool, ids[0], 1, "late", Duration::ZERO, false)
        .await
        .expect("failure");
    assert_eq!(status_of(&db.pool, ids[0]).await, "sent");
    let backlog = outbox::backlog(&db.pool).await.expect("backlog");
    assert_eq!(backlog.pending, 0);
}

#[tokio::test]
async fn the_backlog_counts_pending_rows_and_the_oldest_age() {
    let db = database("my_stmt_backlog").await;
    let empty = outbox::backlog(&db.pool).await.expect("backlog");
    assert_eq!((empty.pending, empty.oldest_secs), (0, 0.0));
    write(&db.pool, &vec![serde_json::json!({}); 3]).await;
    sqlx::query("UPDATE outbox SET created_at = NOW(6) - INTERVAL 90 SECOND LIMIT 1")
        .execute(&db.pool)
        .await
        .expect("age one");
    let backlog = outbox::backlog(&db.pool).await.expect("backlog");
    assert_eq!(backlog.pending, 3);
    assert!((90.0..120.0).contains(&backlog.oldest_secs), "{backlog:?}");
}

#[tokio::test]
async fn failures_are_counted_per_message_across_calls() {
    let db = database("my_stmt_failures").await;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let first = inbox::count_failures(&db.pool, &[(a, "one"), (b, "one")])
        .await
        .expect("count");
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|(_, n)| *n == 1));
    let second = inbox::count_failures(&db.pool, &[(a, "two")])
        .await
        .expect("count");
    assert_eq!(second, vec![(a, 2)]);
    let last: String =
        sqlx::query_scalar("SELECT last_error FROM message_failures WHERE message_id = ?")
            .bind(a)
            .fetch_one(&db.pool)
            .await
            .expect("last error");
    assert_eq!(last, "two");

    // Through the consumer loop's store: an id given twice counts once.
    use platform::messaging::consumer::ConsumerStore;
    let store = MySqlStore(db.pool.clone());
    let counts = store
        .count_failures(&[(b, "x".into()), (b, "y".into())])
        .await
        .expect("count");
    assert_eq!(counts.get(&b), Some(&2));
    assert!(store.answers().await);
}

#[tokio::test]
async fn retention_deletes_old_rows_only_a_batch_at_a_time() {
    let db = database("my_stmt_retention").await;
    let ids = write(&db.pool, &vec![serde_json::json!({}); 5]).await;
    outbox::mark_sent(&db.pool, &ids).await.expect("mark");
    // Four were sent two hours ago, one just now.
    sqlx::query("UPDATE outbox SET sent_at = NOW(6) - INTERVAL 2 HOUR WHERE event_id <> ?")
        .bind(ids[4])
        .execute(&db.pool)
        .await
        .expect("age");
    let hour = Duration::from_secs(3600);
    assert_eq!(
        outbox::delete_sent_before(&db.pool, hour, 3)
            .await
            .expect("delete"),
        3
    );
    assert_eq!(
        outbox::delete_sent_before(&db.pool, hour, 3)
            .await
            .expect("delete"),
        1
    );
    assert_eq!(
        outbox::delete_sent_before(&db.pool, hour, 3)
            .await
            .expect("delete"),
        0
    );
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT event_id FROM outbox")
        .fetch_all(&db.pool)
        .await
        .expect("left");
    assert_eq!(left, vec![ids[4]]);

    for (age, id) in [(7200, Uuid::now_v7()), (0, Uuid::now_v7())] {
        sqlx::query(
            "INSERT INTO processed_messages (message_id, kind, processed_at) \
             VALUES (?, 'k', NOW(6) - INTERVAL ? SECOND)",
        )
        .bind(id)
        .bind(age)
        .execute(&db.pool)
        .await
        .expect("processed");
    }
    assert_eq!(
        inbox::delete_processed_before(&db.pool, hour, 10)
            .await
            .expect("delete"),
        1
    );
    inbox::count_failures(&db.pool, &[(Uuid::now_v7(), "e")])
        .await
        .expect("count");
    assert_eq!(
        inbox::delete_failures_before(&db.pool, hour, 10)
            .await
            .expect("delete"),
        0
    );
}

#[tokio::test]
async fn an_operator_retry_revives_a_dead_row_and_finds_no_missing_one() {
    let db = database("my_stmt_admin").await;
    let ids = write(&db.pool, &[serde_json::json!({ "n": 1 })]).await;
    outbox::record_failure(&db.pool, ids[0], 10, "unroutable", Duration::ZERO, true)
        .await
        .expect("dead");
    let dead = admin::list(&db.pool, "dead", 0, 10).await.expect("list");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].event_id, ids[0]);
    assert_eq!(dead[0].last_error.as_deref(), Some("unroutable"));
    assert!(
        admin::list(&db.pool, "dead", dead[0].id, 10)
            .await
            .expect("list")
            .is_empty()
    );

    let revived = admin::retry(&db.pool, dead[0].id)
        .await
        .expect("retry")
        .expect("the row exists");
    assert_eq!(revived.status, "pending");
    assert_eq!(revived.attempts, 0);
    assert_eq!(revived.last_error, None);
    assert_eq!(revived.payload, serde_json::json!({ "n": 1 }));
    // Retrying it again matches a row that does not change: still found.
    assert!(
        admin::retry(&db.pool, dead[0].id)
            .await
            .expect("retry")
            .is_some()
    );
    assert!(
        admin::retry(&db.pool, dead[0].id + 1000)
            .await
            .expect("retry")
            .is_none()
    );
}
