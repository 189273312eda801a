//! Settling a batch of verdicts: one statement settles the orders and records the message ids
//! together, each verdict judged as if alone and in arrival order, after one read that
//! locks nothing; a batch of one takes the same path. On either backend.

use std::time::Duration;

use order_service::orders::payment::PaymentWindow;
use order_service::orders::settle::{self, Effect, Incoming, MessageKey, SettleError, Verdict};
use platform::messaging::consumer::Handled;
use platform::telemetry::TraceContext;
use shared::events::RejectionReason;
use shared::ids::OrderId;
use shared::keys;
use testkit::{Backend, BackendDatabase, eventually, execute_on, uuid_literal};
use uuid::Uuid;

testkit::on_each_backend!(
    a_first_verdict_settles_the_order_and_records_the_message_together,
    a_message_seen_before_never_settles_an_order,
    a_batch_settles_each_order_by_its_first_verdict_in_arrival_order,
    an_order_cancelled_between_the_read_and_the_write_makes_the_batch_judge_again,
);

async fn database(backend: Backend) -> BackendDatabase {
    BackendDatabase::create(backend, "first_verdict", order_service::migrators()).await
}

/// `id` as `db`'s statements compare a uuid.
fn literal(db: &BackendDatabase, id: Uuid) -> String {
    uuid_literal(db.backend(), &id.to_string())
}

async fn pending_order(db: &BackendDatabase) -> OrderId {
    let order_id = OrderId::new();
    let insert = format!(
        "INSERT INTO orders (order_id, user_id, items, amount) \
         VALUES ({}, 1, '[{{\"product_id\": 1, \"quantity\": 1}}]', 10)",
        literal(db, order_id.0)
    );
    db.execute(&insert, &insert).await;
    order_id
}

/// The order's column `name`.
async fn column<T>(db: &BackendDatabase, order_id: OrderId, name: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
    T: Send + Unpin,
{
    let read = format!(
        "SELECT {name} FROM orders WHERE order_id = {}",
        literal(db, order_id.0)
    );
    db.scalar(&read, &read).await
}

async fn status(db: &BackendDatabase, order_id: OrderId) -> String {
    column(db, order_id, "status").await
}

/// Whether `message_id` is recorded (at most once: it is the key).
async fn recorded(db: &BackendDatabase, message_id: Uuid) -> bool {
    let read = format!(
        "SELECT count(*) FROM processed_messages WHERE message_id = {}",
        literal(db, message_id)
    );
    db.count(&read).await == 1
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

async fn settle_committed(db: &BackendDatabase, incoming: &[Incoming]) -> Vec<Handled> {
    let mut tx = db.database().begin().await.expect("a transaction");
    let settled = settle::settle_all(tx.conn(), incoming, PaymentWindow::OFF)
        .await
        .expect("settles");
    tx.commit().await.expect("commits");
    settled.handled
}

async fn a_first_verdict_settles_the_order_and_records_the_message_together(backend: Backend) {
    let db = database(backend).await;
    let order_id = pending_order(&db).await;
    let first = verdict(
        order_id,
        Verdict::Rejected(RejectionReason::InsufficientStock),
    );
    assert_eq!(
        settle_committed(&db, std::slice::from_ref(&first)).await,
        [Handled::Applied]
    );
    assert_eq!(status(&db, order_id).await, "REJECTED");
    assert!(recorded(&db, message_id(&first)).await);

    // The order left PENDING: a late verdict is recorded and changes nothing.
    let late = verdict(order_id, Verdict::Reserved);
    settle_committed(&db, std::slice::from_ref(&late)).await;
    assert_eq!(status(&db, order_id).await, "REJECTED");
    assert!(recorded(&db, message_id(&late)).await);
}

async fn a_message_seen_before_never_settles_an_order(backend: Backend) {
    let db = database(backend).await;
    let order_id = pending_order(&db).await;
    let seen = verdict(order_id, Verdict::Reserved);
    let insert = format!(
        "INSERT INTO processed_messages (message_id, kind) VALUES ({}, 'inventory.reserved')",
        literal(&db, message_id(&seen))
    );
    db.execute(&insert, &insert).await;

    assert_eq!(settle_committed(&db, &[seen]).await, [Handled::Duplicate]);
    assert_eq!(status(&db, order_id).await, "PENDING");
}

async fn a_batch_settles_each_order_by_its_first_verdict_in_arrival_order(backend: Backend) {
    let db = database(backend).await;
    let (a, b) = (pending_order(&db).await, pending_order(&db).await);
    let a_reserved = verdict(a, Verdict::Reserved);
    let batch = [
        a_reserved.clone(),
        verdict(b, Verdict::Rejected(RejectionReason::UnknownProduct)),
        // A late, contradicting verdict for `a`, and a duplicate of its first one.
        verdict(a, Verdict::Rejected(RejectionReason::InsufficientStock)),
        a_reserved,
    ];
    assert_eq!(
        settle_committed(&db, &batch).await,
        [
            Handled::Applied,
            Handled::Applied,
            Handled::Applied,
            Handled::Duplicate
        ]
    );
    assert_eq!(status(&db, a).await, "CONFIRMED");
    assert_eq!(status(&db, b).await, "REJECTED");
    let reason: Option<String> = column(&db, b, "rejection_reason").await;
    assert_eq!(reason.as_deref(), Some("unknown_product"));
    assert_eq!(
        db.count("SELECT count(*) FROM processed_messages").await,
        3,
        "every distinct message id recorded once"
    );
}

async fn an_order_cancelled_between_the_read_and_the_write_makes_the_batch_judge_again(
    backend: Backend,
) {
    let db = database(backend).await;
    let order_id = pending_order(&db).await;
    // A cancel in flight holds the order's row, PENDING as the batch reads it...
    let mut cancel = db
        .database()
        .begin()
        .await
        .expect("the cancel's transaction");
    let update = format!(
        "UPDATE orders SET status = 'CANCELLED' WHERE order_id = {}",
        literal(&db, order_id.0)
    );
    execute_on(cancel.conn(), &update).await;
    let reserved = verdict(order_id, Verdict::Reserved);
    let batch = [reserved.clone()];
    let database = db.database();
    let settling = tokio::spawn(async move {
        let mut conn = database.acquire().await.expect("a connection");
        settle::settle_all(conn.conn(), &batch, PaymentWindow::OFF)
            .await
            .map(|settled| settled.handled)
    });
    // ...and commits while the batch's write waits for the row. The write then finds the
    // order no longer PENDING and undoes itself: on PostgreSQL its one statement's guard
    // raises a serialization failure; on MySQL the store sees its update move fewer orders
    // than decided, rolls back and reports the same failure.
    wait_for_the_write_to_wait(&db).await;
    cancel.commit().await.expect("the cancel commits");
    let first = settling.await.expect("the task");
    assert!(matches!(first, Err(SettleError::Raced)), "{first:?}");
    assert!(
        !recorded(&db, message_id(&reserved)).await,
        "nothing written"
    );
    assert_eq!(status(&db, order_id).await, "CANCELLED");

    // Judged again, the verdict finds the order cancelled: recorded, and the stock asked back.
    let database = db.database();
    let mut conn = database.acquire().await.expect("a connection");
    let again = settle::settle_all(
        conn.conn(),
        std::slice::from_ref(&reserved),
        PaymentWindow::OFF,
    )
    .await
    .expect("settles");
    assert_eq!(again.handled, [Handled::Applied]);
    assert_eq!(again.events.len(), 1, "a release request");
    assert_eq!(status(&db, order_id).await, "CANCELLED");
    assert!(recorded(&db, message_id(&reserved)).await);
}

/// Returns once the batch's write waits for the row the cancel holds. On MySQL that is the
/// write's first statement, which locks the batch's orders, running; it is told from the
/// batch's read, which begins with the same words and locks nothing, by its `FOR UPDATE`.
async fn wait_for_the_write_to_wait(db: &BackendDatabase) {
    eventually(Duration::from_secs(10), || async {
        let waiting = db.lock_waits("", "SELECT o.order_id%FOR UPDATE").await;
        (waiting > 0).then_some(())
    })
    .await;
}
