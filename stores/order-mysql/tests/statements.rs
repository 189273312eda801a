//! The statements against the machine's MariaDB (or MySQL), each test in a database of its
//! own built from the orders migrations (`testkit::mysql`), with sessions as the services'
//! pool sets them. What the tests arrange and inspect is plain `sqlx::query`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use order_mysql::{orders, payment, placement, reconcile, settle, tokens};
use rust_decimal::Decimal;
use sqlx::{Acquire, MySqlPool};
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/order-service/mysql");

async fn database() -> TestMySqlDatabase {
    TestMySqlDatabase::create("order_mysql", &ORDERS).await
}

fn items() -> serde_json::Value {
    serde_json::json!([{"product_id": 1, "quantity": 2}])
}

/// Places orders through the intake's statement; their order ids and tokens.
async fn place(pool: &MySqlPool, n: usize) -> Vec<(Uuid, Uuid)> {
    let ids: Vec<(Uuid, Uuid)> = (0..n).map(|_| (Uuid::new_v4(), Uuid::new_v4())).collect();
    place_these(pool, &ids, Decimal::new(1999, 2)).await;
    ids
}

async fn place_these(pool: &MySqlPool, ids: &[(Uuid, Uuid)], amount: Decimal) -> Vec<Uuid> {
    let (items, headers) = (items(), serde_json::json!({}));
    let payloads: Vec<serde_json::Value> = ids
        .iter()
        .map(|(order_id, _)| serde_json::json!({"payload": {"order_id": order_id.to_string()}}))
        .collect();
    let batch: Vec<placement::NewPlacement<'_>> = ids
        .iter()
        .zip(&payloads)
        .map(|((order_id, token), payload)| placement::NewPlacement {
            order_id: *order_id,
            user_id: 7,
            items: &items,
            amount,
            created_at: "2026-01-06T10:00:00.123456Z".parse().expect("time"),
            token: *token,
            fingerprint: "fp",
            response_status: 202,
            response_body: b"{\"ok\":true}",
            taker: Some(7),
            event: platform_mysql_row(*order_id, payload, &headers),
        })
        .collect();
    let mut conn = pool.acquire().await.expect("connection");
    placement::insert_batch(&mut conn, &batch)
        .await
        .expect("placed")
}

fn platform_mysql_row<'a>(
    event_id: Uuid,
    payload: &'a serde_json::Value,
    headers: &'a serde_json::Value,
) -> platform_mysql::outbox::NewRow<'a> {
    platform_mysql::outbox::NewRow {
        event_id,
        exchange: "orders",
        routing_key: "order.created",
        payload,
        headers,
    }
}

async fn count(pool: &MySqlPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

async fn set(pool: &MySqlPool, order_id: Uuid, status: &str, due_in_secs: Option<i64>) {
    sqlx::query(
        "UPDATE orders SET status = ?,
                payment_due_at = CASE WHEN ? IS NULL THEN NULL
                                      ELSE NOW(6) + INTERVAL ? SECOND END
         WHERE order_id = ?",
    )
    .bind(status)
    .bind(due_in_secs)
    .bind(due_in_secs)
    .bind(order_id)
    .execute(pool)
    .await
    .expect("status set");
}

#[tokio::test]
async fn a_batch_is_placed_with_its_outcomes_and_events_and_amounts_and_times_exact() {
    let db = database().await;
    let placed = place(&db.pool, 3).await;
    assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM orders").await, 3);
    assert_eq!(
        count(&db.pool, "SELECT COUNT(*) FROM idempotency_keys").await,
        3
    );
    assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM outbox").await, 3);
    let mut conn = db.pool.acquire().await.expect("connection");
    let order = orders::find(&mut conn, placed[0].0)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(order.amount, Decimal::new(1999, 2));
    assert_eq!(order.amount.to_string(), "19.99");
    let at: DateTime<Utc> = "2026-01-06T10:00:00.123456Z".parse().expect("time");
    assert_eq!((order.created_at, order.updated_at), (at, at));
    assert_eq!(order.status, "PENDING");
    let read: serde_json::Value = serde_json::from_str(&order.items).expect("items");
    assert_eq!(read, items());
    let outcomes = tokens::find_all(&mut conn, &[placed[1].1, Uuid::new_v4()])
        .await
        .expect("outcomes");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].order_id, placed[1].0);
    assert_eq!(outcomes[0].response_body, b"{\"ok\":true}");
    assert_eq!(
        (outcomes[0].response_status, outcomes[0].taker),
        (202, Some(7))
    );
}

#[tokio::test]
async fn a_used_token_is_skipped_alone_and_its_order_never_written() {
    let db = database().await;
    let first = place(&db.pool, 1).await;
    let again = (Uuid::new_v4(), first[0].1);
    let fresh = (Uuid::new_v4(), Uuid::new_v4());
    let inserted = place_these(&db.pool, &[again, fresh], Decimal::ONE).await;
    assert_eq!(inserted, vec![fresh.1]);
    let mut conn = db.pool.acquire().await.expect("connection");
    assert!(
        orders::find(&mut conn, again.0)
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        orders::find(&mut conn, fresh.0)
            .await
            .expect("read")
            .is_some()
    );
    assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM outbox").await, 2);
    let outcome = tokens::find_all(&mut conn, &[first[0].1])
        .await
        .expect("outcome");
    assert_eq!(outcome[0].order_id, first[0].0, "the first outcome stands");
}

#[tokio::test]
async fn a_confirm_needs_an_open_window_and_a_waiting_order() {
    let db = database().await;
    let placed = place(&db.pool, 3).await;
    set(&db.pool, placed[0].0, "AWAITING_PAYMENT", Some(60)).await;
    set(&db.pool, placed[1].0, "AWAITING_PAYMENT", Some(-1)).await;
    let mut conn = db.pool.acquire().await.expect("connection");
    let confirmed = payment::confirm_open(&mut conn, placed[0].0)
        .await
        .expect("confirm");
    assert_eq!(confirmed.expect("confirmed").status, "CONFIRMED");
    // Matched rows are counted, not changed ones: a second confirm matches nothing.
    assert!(
        payment::confirm_open(&mut conn, placed[0].0)
            .await
            .expect("again")
            .is_none()
    );
    assert!(
        payment::confirm_open(&mut conn, placed[1].0)
            .await
            .expect("closed")
            .is_none()
    );
    assert!(
        payment::confirm_open(&mut conn, placed[2].0)
            .await
            .expect("pending")
            .is_none()
    );
}

#[tokio::test]
async fn due_orders_expire_earliest_first_and_a_held_one_is_skipped() {
    let db = database().await;
    let placed = place(&db.pool, 3).await;
    set(&db.pool, placed[0].0, "AWAITING_PAYMENT", Some(-5)).await;
    set(&db.pool, placed[1].0, "AWAITING_PAYMENT", Some(-10)).await;
    set(&db.pool, placed[2].0, "AWAITING_PAYMENT", Some(60)).await;
    let mut conn = db.pool.acquire().await.expect("connection");
    assert!(payment::any_due(&mut conn).await.expect("due"));
    // Another transaction holds the earliest.
    let mut holder = db.pool.begin().await.expect("holder");
    orders::find_for_update(&mut holder, placed[1].0)
        .await
        .expect("lock");
    let expired = payment::expire_due(&mut conn, None, 10)
        .await
        .expect("expire");
    assert_eq!(
        expired.iter().map(|o| o.order_id).collect::<Vec<_>>(),
        [placed[0].0]
    );
    assert_eq!(expired[0].status, "EXPIRED");
    holder.rollback().await.expect("release");
    let expired = payment::expire_due(&mut conn, None, 10)
        .await
        .expect("expire");
    assert_eq!(
        expired.iter().map(|o| o.order_id).collect::<Vec<_>>(),
        [placed[1].0]
    );
    assert!(!payment::any_due(&mut conn).await.expect("none due"));
    let only = payment::expire_due(&mut conn, Some(placed[2].0), 10)
        .await
        .expect("open");
    assert!(only.is_empty(), "an open window does not expire");
}

#[tokio::test]
async fn settling_moves_pending_orders_and_a_stale_read_writes_nothing() {
    let db = database().await;
    let placed = place(&db.pool, 2).await;
    let (a, b) = (placed[0].0, placed[1].0);
    let mut conn = db.pool.acquire().await.expect("connection");
    let message = Uuid::new_v4();
    let (rows, seen) = settle::read_for_settlement(&mut conn, &[a, b], &[message])
        .await
        .expect("read");
    assert_eq!(rows.len(), 2);
    assert!(seen.is_empty());
    let headers = serde_json::json!({});
    let payload = serde_json::json!({"payload": {"order_id": a.to_string()}});
    let write = settle::SettlementWrite {
        settled: vec![
            settle::Settled {
                order_id: a,
                status: "AWAITING_PAYMENT",
                reason: None,
            },
            settle::Settled {
                order_id: b,
                status: "REJECTED",
                reason: Some("insufficient_stock"),
            },
        ],
        released: vec![],
        recorded: vec![(message, "inventory.reserved")],
        outbox: vec![platform_mysql_row(Uuid::new_v4(), &payload, &headers)],
    };
    settle::write_settlement(&mut conn, &write, Duration::from_secs(900))
        .await
        .expect("written");
    let a_row = orders::find(&mut conn, a).await.expect("a").expect("a");
    assert_eq!(a_row.status, "AWAITING_PAYMENT");
    let due = a_row.payment_due_at.expect("due") - a_row.updated_at;
    assert_eq!(due.num_seconds(), 900);
    let b_row = orders::find(&mut conn, b).await.expect("b").expect("b");
    assert_eq!(
        (b_row.status.as_str(), b_row.rejection_reason.as_deref()),
        ("REJECTED", Some("insufficient_stock"))
    );
    let (_, seen) = settle::read_for_settlement(&mut conn, &[], &[message])
        .await
        .expect("seen");
    assert_eq!(seen, [message]);

    // The same write again: both orders left PENDING, so nothing is written, as 40001.
    let before = count(&db.pool, "SELECT COUNT(*) FROM outbox").await;
    let error = settle::write_settlement(&mut conn, &write, Duration::ZERO)
        .await
        .expect_err("stale");
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("40001"));
    assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM outbox").await, before);

    // A message recorded meanwhile: the same answer, and the order is not moved.
    let c = place(&db.pool, 1).await[0].0;
    let write = settle::SettlementWrite {
        settled: vec![settle::Settled {
            order_id: c,
            status: "CONFIRMED",
            reason: None,
        }],
        recorded: vec![(message, "inventory.reserved")],
        ..Default::default()
    };
    let error = settle::write_settlement(&mut conn, &write, Duration::ZERO)
        .await
        .expect_err("recorded");
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("40001"));
    let c_row = orders::find(&mut conn, c).await.expect("c").expect("c");
    assert_eq!(c_row.status, "PENDING", "rolled back with the rest");
}

#[tokio::test]
async fn a_release_is_recorded_once_for_a_given_back_order_only() {
    let db = database().await;
    let placed = place(&db.pool, 2).await;
    set(&db.pool, placed[0].0, "CANCELLED", None).await;
    let mut conn = db.pool.acquire().await.expect("connection");
    let write = settle::SettlementWrite {
        released: vec![placed[0].0, placed[1].0],
        ..Default::default()
    };
    settle::write_settlement(&mut conn, &write, Duration::ZERO)
        .await
        .expect("written");
    let (rows, _) = settle::read_for_settlement(&mut conn, &[placed[0].0, placed[1].0], &[])
        .await
        .expect("read");
    let released: Vec<(Uuid, bool)> = rows.iter().map(|r| (r.order_id, r.released)).collect();
    assert!(released.contains(&(placed[0].0, true)));
    assert!(
        released.contains(&(placed[1].0, false)),
        "a PENDING order is not released"
    );
}

#[tokio::test]
async fn reconciliation_claims_stale_orders_once_a_period() {
    let db = database().await;
    let placed = place(&db.pool, 3).await;
    set(&db.pool, placed[2].0, "EXPIRED", None).await;
    sqlx::query("UPDATE orders SET updated_at = NOW(6) - INTERVAL 1 HOUR")
        .execute(&db.pool)
        .await
        .expect("aged");
    let mut conn = db.pool.acquire().await.expect("connection");
    let minute = Duration::from_secs(60);
    let claimed = reconcile::claim_stale_pending(&mut conn, minute, 1)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "the limit holds");
    let rest = reconcile::claim_stale_pending(&mut conn, minute, 10)
        .await
        .expect("claim");
    assert_eq!(rest.len(), 1, "the claimed one waits a period");
    assert_ne!(rest[0].order_id, claimed[0].order_id);
    assert!(
        reconcile::claim_stale_pending(&mut conn, minute, 10)
            .await
            .expect("none")
            .is_empty()
    );
    let given_back = reconcile::claim_stale_cancelled(&mut conn, minute, 10)
        .await
        .expect("claim");
    assert_eq!(
        given_back.iter().map(|o| o.order_id).collect::<Vec<_>>(),
        [placed[2].0]
    );
    assert!(
        reconcile::claim_stale_cancelled(&mut conn, minute, 10)
            .await
            .expect("none")
            .is_empty()
    );
}

#[tokio::test]
async fn unsent_events_are_found_by_order_among_the_pending_rows() {
    let db = database().await;
    let placed = place(&db.pool, 2).await;
    let ids = [placed[0].0, placed[1].0, Uuid::new_v4()];
    let mut conn = db.pool.acquire().await.expect("connection");
    let mut unsent = reconcile::unsent(&mut conn, "order.created", &ids)
        .await
        .expect("unsent");
    unsent.sort();
    let mut expected = vec![placed[0].0, placed[1].0];
    expected.sort();
    assert_eq!(unsent, expected);
    sqlx::query("UPDATE outbox SET status = 'sent'")
        .execute(&db.pool)
        .await
        .expect("sent");
    assert!(
        reconcile::unsent(&mut conn, "order.created", &ids)
            .await
            .expect("none")
            .is_empty()
    );
    assert!(
        reconcile::unsent(&mut conn, "order.cancelled", &[])
            .await
            .expect("none")
            .is_empty()
    );
}

#[tokio::test]
async fn pages_run_newest_first_with_filters_and_a_position() {
    let db = database().await;
    let placed = place(&db.pool, 3).await;
    set(&db.pool, placed[0].0, "CANCELLED", None).await;
    let mut conn = db.pool.acquire().await.expect("connection");
    let all = orders::list(
        &mut conn,
        orders::Page {
            fetch: 10,
            ..Default::default()
        },
    )
    .await
    .expect("all");
    assert_eq!(all.len(), 3);
    // Same created_at: the order id breaks the tie, descending.
    let mut ids: Vec<Uuid> = placed.iter().map(|p| p.0).collect();
    ids.sort_by(|a, b| b.cmp(a));
    assert_eq!(all.iter().map(|o| o.order_id).collect::<Vec<_>>(), ids);
    let after = orders::list(
        &mut conn,
        orders::Page {
            after: Some((all[0].created_at, all[0].order_id)),
            fetch: 10,
            ..Default::default()
        },
    )
    .await
    .expect("after");
    assert_eq!(
        after.iter().map(|o| o.order_id).collect::<Vec<_>>(),
        ids[1..]
    );
    let cancelled = orders::list(
        &mut conn,
        orders::Page {
            status: Some("CANCELLED"),
            user_id: Some(7),
            fetch: 10,
            ..Default::default()
        },
    )
    .await
    .expect("cancelled");
    assert_eq!(cancelled.len(), 1);
    let none = orders::list(
        &mut conn,
        orders::Page {
            user_id: Some(8),
            fetch: 10,
            ..Default::default()
        },
    )
    .await
    .expect("none");
    assert!(none.is_empty());
}

#[tokio::test]
async fn the_first_secret_stored_is_the_one_every_instance_reads() {
    let db = database().await;
    let first = tokens::load_or_store_secret(&db.pool, &[1; 32])
        .await
        .expect("stored");
    let second = tokens::load_or_store_secret(&db.pool, &[2; 32])
        .await
        .expect("read");
    assert_eq!((first.clone(), second), (vec![1; 32], vec![1; 32]));
    let short =
        sqlx::query("INSERT INTO idempotency_token_secret (singleton, secret) VALUES (2, ?)")
            .bind(vec![3u8; 32])
            .execute(&db.pool)
            .await;
    assert!(short.is_err(), "one row at most");
}

#[tokio::test]
async fn a_status_change_in_a_transaction_reads_back_the_row() {
    let db = database().await;
    let placed = place(&db.pool, 1).await;
    let mut conn = db.pool.acquire().await.expect("connection");
    let mut tx = conn.begin().await.expect("tx");
    let row = orders::find_for_update(&mut tx, placed[0].0)
        .await
        .expect("lock")
        .expect("there");
    assert_eq!(row.status, "PENDING");
    let row = orders::set_status(&mut tx, placed[0].0, "CANCELLED")
        .await
        .expect("set");
    assert_eq!(row.status, "CANCELLED");
    assert!(row.updated_at > row.created_at);
    tx.commit().await.expect("commit");
}
