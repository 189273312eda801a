//! The order-events consumer's batch path, called with batches as the consumer loop hands
//! them over: every message gets the outcome it would have had alone, in arrival order, on
//! either backend. (This path replaced the one-statement reservation: its tests live on here.)

use std::time::Duration;

use inventory_service::reservations::consumer::OrderEvents;
use inventory_service::stock::lock::{LockOptions, Locker, RedisLock};
use platform::messaging::consumer::{Message, Outcome};
use platform::messaging::outbox::OutboxSignal;
use platform::storage::Tx;
use platform::storage::redis::health::RedisHealth;
use platform::telemetry::TraceContext;
use serde_json::{Value, json};
use shared::ids::ProductId;
use shared::keys::{self, RedisKeys};
use testkit::{Backend, BackendDatabase, redis_prefix, redis_url, uuid_literal};
use uuid::Uuid;

use crate::helpers::{database_with_products, refuse_reservations_of};

testkit::on_each_backend!(
    each_order_of_a_batch_is_judged_against_the_stock_the_earlier_ones_left,
    a_poison_message_inside_a_batch_fails_alone,
    a_message_that_fails_inside_a_batch_fails_alone,
    a_creation_and_its_cancellation_in_one_batch_keep_the_saga_rules,
    a_seen_message_or_a_seen_order_deducts_nothing_and_is_answered_again,
    a_busy_product_leaves_its_orders_for_a_later_batch_without_stalling_the_others,
    a_product_row_held_by_a_stuck_transaction_holds_back_only_the_events_that_need_it,
);

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    a_creation_and_its_cancellation_in_two_batches_at_once_keep_the_saga_rules,
);

struct Setup {
    db: BackendDatabase,
    handler: OrderEvents,
    /// Another process on the same Redis keys.
    other_process: Locker,
}

fn locker(prefix: &str) -> Locker {
    let redis = platform::storage::redis::connect(&redis_url()).expect("a Redis manager");
    let options = LockOptions {
        ttl: Duration::from_secs(10),
        wait: Duration::from_secs(5),
        renew: true,
    };
    Locker::new(RedisLock::new(
        redis,
        RedisKeys::new(prefix),
        options,
        RedisHealth::default(),
    ))
}

async fn setup(backend: Backend, products: &[(i64, i64)]) -> Setup {
    testkit::init_logs();
    let db = database_with_products(backend, "batch", products).await;
    let prefix = redis_prefix();
    let handler = OrderEvents::new(db.database(), locker(&prefix), OutboxSignal::default());
    Setup {
        db,
        handler,
        other_process: locker(&prefix),
    }
}

fn message(event_type: &str, payload: Value) -> Message {
    let body = json!({"event_id": Uuid::now_v7(), "version": 1, "occurred_at": chrono::Utc::now(),
        "event_type": event_type, "payload": payload});
    Message {
        routing_key: event_type.to_owned(),
        body: body.to_string().into_bytes(),
        trace: TraceContext::new_root(),
        previous_deliveries: 0,
    }
}

fn created(order_id: Uuid, items: &[(i64, i64)]) -> Message {
    let items: Vec<Value> = items
        .iter()
        .map(|(p, q)| json!({"product_id": p, "quantity": q}))
        .collect();
    message(
        keys::ORDER_CREATED,
        json!({"order_id": order_id, "user_id": 1, "items": items, "amount": "1.00"}),
    )
}

fn cancelled(order_id: Uuid) -> Message {
    message(keys::ORDER_CANCELLED, json!({"order_id": order_id}))
}

/// `order_id`'s reservation: its state and rejection reason.
async fn state(db: &BackendDatabase, order_id: Uuid) -> Option<(String, Option<String>)> {
    let id = uuid_literal(db.backend(), &order_id.to_string());
    let read = |id: &str| {
        format!(
            "SELECT (SELECT concat(state, '/', coalesce(rejection_reason, '')) \
             FROM reservations WHERE order_id = {id})"
        )
    };
    let row: Option<String> = db.scalar(&read(&id), &read(&id)).await;
    row.map(|row| {
        let (state, reason) = row.split_once('/').expect("state/reason");
        (
            state.to_owned(),
            Some(reason.to_owned()).filter(|r| !r.is_empty()),
        )
    })
}

async fn stock(db: &BackendDatabase, product: i64) -> i64 {
    db.count(&format!(
        "SELECT stock FROM products WHERE product_id = {product}"
    ))
    .await
}

/// The routing keys of the outbox, in the order they were written.
async fn events(db: &BackendDatabase) -> Vec<String> {
    let keys: Option<String> = db
        .scalar(
            "SELECT string_agg(routing_key, ',' ORDER BY id) FROM outbox",
            "SELECT GROUP_CONCAT(routing_key ORDER BY id SEPARATOR ',') FROM outbox",
        )
        .await;
    keys.map(|keys| keys.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

fn labels(outcomes: &[Outcome]) -> Vec<&'static str> {
    outcomes
        .iter()
        .map(platform::messaging::consumer::result_label)
        .collect()
}

fn applied(state: &str) -> Option<(String, Option<String>)> {
    Some((state.to_owned(), None))
}

async fn each_order_of_a_batch_is_judged_against_the_stock_the_earlier_ones_left(backend: Backend) {
    let s = setup(backend, &[(1, 5)]).await;
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let batch = [
        created(a, &[(1, 2)]),
        created(b, &[(1, 4)]),
        created(c, &[(1, 3)]),
    ];
    let outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    assert_eq!(labels(&outcomes), ["applied"; 3]);
    assert_eq!(state(&s.db, a).await, applied("APPLIED"));
    assert_eq!(
        state(&s.db, b).await,
        Some(("REJECTED".into(), Some("insufficient_stock".into()))),
        "the large order in the middle is refused"
    );
    assert_eq!(
        state(&s.db, c).await,
        applied("APPLIED"),
        "and does not stop the later small one"
    );
    assert_eq!(stock(&s.db, 1).await, 0);
    assert_eq!(
        events(&s.db).await,
        [
            keys::INVENTORY_RESERVED,
            keys::INVENTORY_REJECTED,
            keys::INVENTORY_RESERVED
        ]
    );
}

async fn a_poison_message_inside_a_batch_fails_alone(backend: Backend) {
    let s = setup(backend, &[(1, 5)]).await;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let mut garbage = created(Uuid::now_v7(), &[(1, 1)]);
    garbage.body = b"not json".to_vec();
    let batch = [
        created(a, &[(1, 1)]),
        garbage,
        created(Uuid::now_v7(), &[(1, 0)]),
        created(b, &[(1, 1)]),
    ];
    let outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    assert_eq!(
        labels(&outcomes),
        ["applied", "dead_lettered", "dead_lettered", "applied"]
    );
    assert_eq!(stock(&s.db, 1).await, 3);
}

async fn a_message_that_fails_inside_a_batch_fails_alone(backend: Backend) {
    let s = setup(backend, &[(1, 5)]).await;
    let (a, bad, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    refuse_reservations_of(&s.db, bad).await;
    let batch = [
        created(a, &[(1, 1)]),
        created(bad, &[(1, 1)]),
        created(c, &[(1, 1)]),
    ];
    let mut outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    // Applied one by one after the batch failed, a message may find the product row still
    // locked by the failed statement's session, which was closed when it failed and may not
    // have rolled back yet: that is contention, kept and tried again, as the consumer loop
    // does (never a retry spent, never a dead letter).
    for _ in 0..20 {
        let contended: Vec<usize> = labels(&outcomes)
            .iter()
            .enumerate()
            .filter(|(_, label)| **label == "contended")
            .map(|(at, _)| at)
            .collect();
        if contended.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again: Vec<Message> = contended.iter().map(|at| batch[*at].clone()).collect();
        let answered = platform::messaging::consumer::handle(&s.handler, &again).await;
        for (at, outcome) in contended.into_iter().zip(answered) {
            outcomes[at] = outcome;
        }
    }
    assert_eq!(labels(&outcomes), ["applied", "retried", "applied"]);
    assert_eq!(state(&s.db, bad).await, None);
    assert_eq!(stock(&s.db, 1).await, 3, "only the two that went through");
}

async fn a_creation_and_its_cancellation_in_one_batch_keep_the_saga_rules(backend: Backend) {
    let s = setup(backend, &[(1, 5)]).await;
    let (first_created, first_cancelled) = (Uuid::now_v7(), Uuid::now_v7());
    let batch = [
        created(first_created, &[(1, 2)]),
        cancelled(first_created),
        // A second copy of the cancellation gives nothing back again.
        cancelled(first_created),
        // The cancellation came first: a tombstone, and the creation deducts nothing.
        cancelled(first_cancelled),
        created(first_cancelled, &[(1, 3)]),
    ];
    let outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    assert_eq!(labels(&outcomes), ["applied"; 5]);
    assert_eq!(state(&s.db, first_created).await, applied("RELEASED"));
    assert_eq!(state(&s.db, first_cancelled).await, applied("CANCELLED"));
    assert_eq!(stock(&s.db, 1).await, 5, "released once, nothing hanging");
    assert_eq!(
        events(&s.db).await,
        [keys::INVENTORY_RESERVED, keys::INVENTORY_RELEASED]
    );
}

async fn a_seen_message_or_a_seen_order_deducts_nothing_and_is_answered_again(backend: Backend) {
    let s = setup(backend, &[(1, 0), (2, 5)]).await;
    let order = Uuid::now_v7();
    let first = created(order, &[(1, 2)]);
    assert_eq!(
        labels(
            &platform::messaging::consumer::handle(&s.handler, std::slice::from_ref(&first)).await
        ),
        ["applied"]
    );
    // The same message again (redelivered), and a re-published creation of the same order.
    let batch = [first, created(order, &[(1, 2)])];
    assert_eq!(
        labels(&platform::messaging::consumer::handle(&s.handler, &batch).await),
        ["duplicate", "applied"]
    );
    let rows = s.db.count("SELECT count(*) FROM reservations").await;
    assert_eq!(rows, 1, "the rejection is written once");
    assert_eq!(
        events(&s.db).await,
        [keys::INVENTORY_REJECTED, keys::INVENTORY_REJECTED],
        "answered again, so order-service can settle if the first answer was lost"
    );
    assert_eq!(stock(&s.db, 2).await, 5);
}

async fn a_busy_product_leaves_its_orders_for_a_later_batch_without_stalling_the_others(
    backend: Backend,
) {
    let s = setup(backend, &[(1, 5), (2, 5)]).await;
    let held = s
        .other_process
        .acquire(ProductId(1))
        .await
        .expect("the lock");
    let (busy, free) = (Uuid::now_v7(), Uuid::now_v7());
    let batch = [
        created(busy, &[(1, 1)]),
        created(free, &[(2, 1)]),
        // Later events of a waiting order wait with it, so they keep their order.
        cancelled(busy),
    ];
    let outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    assert_eq!(labels(&outcomes), ["contended", "applied", "contended"]);
    assert_eq!(state(&s.db, busy).await, None);
    assert_eq!(stock(&s.db, 2).await, 4);

    held.release().await;
    let again = [batch[0].clone(), batch[2].clone()];
    assert_eq!(
        labels(&platform::messaging::consumer::handle(&s.handler, &again).await),
        ["applied", "applied"]
    );
    assert_eq!(state(&s.db, busy).await, applied("RELEASED"));
    assert_eq!(stock(&s.db, 1).await, 5);
}

/// A transaction that holds product `product_id`'s row, as a writer stuck in the database
/// (paused with its transaction open) does, until it is dropped.
async fn hold_row(db: &BackendDatabase, product_id: i64) -> Tx {
    let mut tx = db.database().begin().await.expect("a transaction");
    let lock = format!("SELECT 1 FROM products WHERE product_id = {product_id} FOR UPDATE");
    testkit::execute_on(tx.conn(), &lock).await;
    tx
}

async fn a_product_row_held_by_a_stuck_transaction_holds_back_only_the_events_that_need_it(
    backend: Backend,
) {
    let s = setup(backend, &[(1, 5), (2, 5)]).await;
    let placed = Uuid::now_v7();
    let first = [created(placed, &[(1, 2)])];
    let first = platform::messaging::consumer::handle(&s.handler, &first).await;
    assert_eq!(labels(&first), ["applied"]);

    let stuck = hold_row(&s.db, 1).await;
    let (waiting, free) = (Uuid::now_v7(), Uuid::now_v7());
    let batch = [
        created(waiting, &[(1, 1)]),
        // Its give-back needs product 1's row too.
        cancelled(placed),
        created(free, &[(2, 1)]),
        cancelled(waiting),
    ];
    // Bounded: before, the batch's stock update waited for as long as the row was held.
    let outcomes = tokio::time::timeout(
        Duration::from_secs(60),
        platform::messaging::consumer::handle(&s.handler, &batch),
    )
    .await
    .expect("the batch does not wait for the held row");
    assert_eq!(
        labels(&outcomes),
        ["contended", "contended", "applied", "contended"]
    );
    assert_eq!(state(&s.db, free).await, applied("APPLIED"));
    assert_eq!(state(&s.db, placed).await, applied("APPLIED"));

    stuck.rollback().await.expect("rollback");
    let again = [batch[0].clone(), batch[1].clone(), batch[3].clone()];
    assert_eq!(
        labels(&platform::messaging::consumer::handle(&s.handler, &again).await),
        ["applied"; 3]
    );
    assert_eq!(state(&s.db, placed).await, applied("RELEASED"));
    assert_eq!(state(&s.db, waiting).await, applied("RELEASED"));
    assert_eq!((stock(&s.db, 1).await, stock(&s.db, 2).await), (5, 4));
}

/// On PostgreSQL only: its lock table, and the trigger that reads it, are its own.
#[tokio::test]
async fn a_batch_takes_no_lock_per_order() {
    // PostgreSQL's lock table holds 64 x max_connections locks for all sessions together; a
    // lock per order of a batch of 256, times every consumer channel, could fill it.
    let s = setup(Backend::Postgres, &[(1, 500)]).await;
    let BackendDatabase::Postgres(db) = &s.db else {
        unreachable!("set up on PostgreSQL")
    };
    sqlx::raw_sql(
        "CREATE TABLE advisory_locks_seen (held bigint NOT NULL);
         CREATE FUNCTION count_advisory_locks() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO advisory_locks_seen SELECT count(*) FROM pg_locks
              WHERE locktype = 'advisory' AND pid = pg_backend_pid();
             RETURN NULL;
         END $$;
         CREATE TRIGGER count_advisory_locks AFTER INSERT ON reservations
         FOR EACH STATEMENT EXECUTE FUNCTION count_advisory_locks();",
    )
    .execute(&db.pool)
    .await
    .expect("a trigger");
    let batch: Vec<Message> = (0..100)
        .map(|_| created(Uuid::now_v7(), &[(1, 1)]))
        .collect();
    let outcomes = platform::messaging::consumer::handle(&s.handler, &batch).await;
    assert_eq!(labels(&outcomes), ["applied"; 100]);
    let seen: Vec<i64> = sqlx::query_scalar("SELECT held FROM advisory_locks_seen")
        .fetch_all(&db.pool)
        .await
        .expect("the counts");
    assert_eq!(seen, [0]);
}

async fn a_creation_and_its_cancellation_in_two_batches_at_once_keep_the_saga_rules(
    backend: Backend,
) {
    let s = setup(backend, &[(1, 1000)]).await;
    let orders: Vec<Uuid> = (0..40).map(|_| Uuid::now_v7()).collect();
    let creations: Vec<Message> = orders.iter().map(|o| created(*o, &[(1, 1)])).collect();
    let cancellations: Vec<Message> = orders.iter().map(|o| cancelled(*o)).collect();
    // Two channels, one with the creations and one with the cancellations, each trying
    // again what was contended, as the consumer loop does.
    let until_done = |handler: OrderEvents, mut left: Vec<Message>| async move {
        while !left.is_empty() {
            let outcomes = platform::messaging::consumer::handle(&handler, &left).await;
            left = left
                .into_iter()
                .zip(&outcomes)
                .filter(|(_, outcome)| {
                    assert!(
                        !matches!(outcome, Err(e) if !matches!(e, platform::messaging::consumer::ConsumeError::Contention(_))),
                        "{outcome:?}"
                    );
                    outcome.is_err()
                })
                .map(|(message, _)| message)
                .collect();
        }
    };
    tokio::join!(
        until_done(s.handler.clone(), creations),
        until_done(s.handler.clone(), cancellations)
    );
    for order_id in &orders {
        let (state, _) = state(&s.db, *order_id).await.expect("a reservation");
        assert!(
            state == "CANCELLED" || state == "RELEASED",
            "{order_id}: {state}"
        );
    }
    assert_eq!(stock(&s.db, 1).await, 1000, "everything given back, once");
}
