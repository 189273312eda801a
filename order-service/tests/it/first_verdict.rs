//! Settling a batch of verdicts: one statement settles the orders and records the message
//! ids together, each verdict judged as if alone and in arrival order, after one read that
//! locks nothing; a batch of one takes the same path.

use order_service::orders::payment::PaymentWindow;
use order_service::orders::settle::{self, Effect, Incoming, MessageKey, SettleError, Verdict};
use platform::messaging::consumer::Handled;
use platform::storage::Conn;
use platform::telemetry::TraceContext;
use shared::events::RejectionReason;
use shared::ids::OrderId;
use shared::keys;
use sqlx::PgPool;
use testkit::TestDatabase;
use uuid::Uuid;

async fn pending_order(pool: &PgPool) -> OrderId {
    let order_id = OrderId::new();
    sqlx::query(
        "INSERT INTO orders (order_id, user_id, items, amount) \
         VALUES ($1, 1, '[{\"product_id\": 1, \"quantity\": 1}]', 10)",
    )
    .bind(order_id.0)
    .execute(pool)
    .await
    .expect("an order");
    order_id
}

async fn status(pool: &PgPool, order_id: OrderId) -> String {
    sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1")
        .bind(order_id.0)
        .fetch_one(pool)
        .await
        .expect("the order")
}

async fn recorded(pool: &PgPool, message_id: Uuid) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM processed_messages WHERE message_id = $1)")
        .bind(message_id)
        .fetch_one(pool)
        .await
        .expect("a lookup")
}

fn verdict(order_id: OrderId, verdict: Verdict) -> Incoming {
    let kind = match verdict {
        Verdict::Reserved => keys::INVENTORY_RESERVED,
        Verdict::Rejected(_) => keys::INVENTORY_REJECTED,
    };
    Incoming {
        message: Some(MessageKey {
            id: Uuid::new_v4(),
            kind: kind.to_owned(),
        }),
        effect: Effect::Verdict(order_id, verdict),
        trace: TraceContext::new_root(),
    }
}

fn message_id(incoming: &Incoming) -> Uuid {
    incoming.message.as_ref().expect("a message").id
}

async fn settle_committed(pool: &PgPool, incoming: &[Incoming]) -> Vec<Handled> {
    let mut tx = pool.begin().await.expect("a transaction");
    let settled = settle::settle_all(Conn::from(&mut *tx), incoming, PaymentWindow::OFF)
        .await
        .expect("settles");
    tx.commit().await.expect("commits");
    settled.handled
}

#[tokio::test]
async fn a_first_verdict_settles_the_order_and_records_the_message_together() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let order_id = pending_order(&db.pool).await;
    let first = verdict(
        order_id,
        Verdict::Rejected(RejectionReason::InsufficientStock),
    );
    assert_eq!(
        settle_committed(&db.pool, std::slice::from_ref(&first)).await,
        [Handled::Applied]
    );
    assert_eq!(status(&db.pool, order_id).await, "REJECTED");
    assert!(recorded(&db.pool, message_id(&first)).await);

    // The order left PENDING: a late verdict is recorded and changes nothing.
    let late = verdict(order_id, Verdict::Reserved);
    settle_committed(&db.pool, std::slice::from_ref(&late)).await;
    assert_eq!(status(&db.pool, order_id).await, "REJECTED");
}

#[tokio::test]
async fn a_message_seen_before_never_settles_an_order() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let order_id = pending_order(&db.pool).await;
    let seen = verdict(order_id, Verdict::Reserved);
    sqlx::query(
        "INSERT INTO processed_messages (message_id, kind) VALUES ($1, 'inventory.reserved')",
    )
    .bind(message_id(&seen))
    .execute(&db.pool)
    .await
    .expect("a recorded message");

    assert_eq!(
        settle_committed(&db.pool, &[seen]).await,
        [Handled::Duplicate]
    );
    assert_eq!(status(&db.pool, order_id).await, "PENDING");
}

#[tokio::test]
async fn a_batch_settles_each_order_by_its_first_verdict_in_arrival_order() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let (a, b) = (pending_order(&db.pool).await, pending_order(&db.pool).await);
    let a_reserved = verdict(a, Verdict::Reserved);
    let batch = [
        a_reserved.clone(),
        verdict(b, Verdict::Rejected(RejectionReason::UnknownProduct)),
        // A late, contradicting verdict for `a`, and a duplicate of its first one.
        verdict(a, Verdict::Rejected(RejectionReason::InsufficientStock)),
        a_reserved,
    ];
    assert_eq!(
        settle_committed(&db.pool, &batch).await,
        [
            Handled::Applied,
            Handled::Applied,
            Handled::Applied,
            Handled::Duplicate
        ]
    );
    assert_eq!(status(&db.pool, a).await, "CONFIRMED");
    assert_eq!(status(&db.pool, b).await, "REJECTED");
    let reason: Option<String> =
        sqlx::query_scalar("SELECT rejection_reason FROM orders WHERE order_id = $1")
            .bind(b.0)
            .fetch_one(&db.pool)
            .await
            .expect("the order");
    assert_eq!(reason.as_deref(), Some("unknown_product"));
    let ids: i64 = sqlx::query_scalar("SELECT count(*) FROM processed_messages")
        .fetch_one(&db.pool)
        .await
        .expect("a count");
    assert_eq!(ids, 3, "every distinct message id recorded once");
}

#[tokio::test]
async fn an_order_cancelled_between_the_read_and_the_write_makes_the_batch_judge_again() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let order_id = pending_order(&db.pool).await;
    // A cancel in flight holds the order's row, PENDING as the batch reads it...
    let mut cancel = db.pool.begin().await.expect("the cancel's transaction");
    sqlx::query("UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1")
        .bind(order_id.0)
        .execute(&mut *cancel)
        .await
        .expect("the cancel");
    let reserved = verdict(order_id, Verdict::Reserved);
    let batch = [reserved.clone()];
    let pool = db.pool.clone();
    let settling = tokio::spawn(async move {
        let mut conn = pool.acquire().await.expect("a connection");
        settle::settle_all(Conn::from(&mut *conn), &batch, PaymentWindow::OFF)
            .await
            .map(|settled| settled.handled)
    });
    // ...and commits while the batch's write waits for the row.
    eventually_waiting_on_a_lock(&db.pool).await;
    cancel.commit().await.expect("the cancel commits");
    let first = settling.await.expect("the task");
    assert!(matches!(first, Err(SettleError::Raced)), "{first:?}");
    assert!(
        !recorded(&db.pool, message_id(&reserved)).await,
        "nothing written"
    );

    // Judged again, the verdict finds the order cancelled: recorded, and the stock asked back.
    let mut conn = db.pool.acquire().await.expect("a connection");
    let again = settle::settle_all(
        Conn::from(&mut *conn),
        std::slice::from_ref(&reserved),
        PaymentWindow::OFF,
    )
    .await
    .expect("settles");
    assert_eq!(again.handled, [Handled::Applied]);
    assert_eq!(again.events.len(), 1, "a release request");
    assert_eq!(status(&db.pool, order_id).await, "CANCELLED");
    assert!(recorded(&db.pool, message_id(&reserved)).await);
}

/// Returns once some session of this database waits for a row lock.
async fn eventually_waiting_on_a_lock(pool: &PgPool) {
    for _ in 0..500 {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
              WHERE datname = current_database() AND wait_event_type = 'Lock')",
        )
        .fetch_one(pool)
        .await
        .expect("pg_stat_activity");
        if waiting {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no session ever waited for the row");
}
