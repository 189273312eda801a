//! The one-statement settlement either settles the order and records the message together,
//! or writes nothing.

use order_service::settle::{self, Verdict};
use platform::testing::TestDatabase;
use shared::events::RejectionReason;
use shared::ids::OrderId;
use shared::keys;
use sqlx::PgPool;
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

#[tokio::test]
async fn a_first_verdict_settles_the_order_and_records_the_message_together() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let mut conn = db.pool.acquire().await.expect("a connection");
    let order_id = pending_order(&db.pool).await;
    let message_id = Uuid::new_v4();
    let verdict = Verdict::Rejected(RejectionReason::InsufficientStock);

    let first = settle::apply_first_verdict(
        &mut conn,
        order_id,
        verdict,
        message_id,
        keys::INVENTORY_REJECTED,
    )
    .await
    .expect("runs");
    assert!(first.is_some());
    assert_eq!(status(&db.pool, order_id).await, "REJECTED");
    assert!(recorded(&db.pool, message_id).await);

    // The order left PENDING: a second verdict writes nothing, not even its message id.
    let late = Uuid::new_v4();
    let second = settle::apply_first_verdict(
        &mut conn,
        order_id,
        Verdict::Reserved,
        late,
        keys::INVENTORY_RESERVED,
    )
    .await
    .expect("runs");
    assert!(second.is_none());
    assert_eq!(status(&db.pool, order_id).await, "REJECTED");
    assert!(!recorded(&db.pool, late).await);
}

#[tokio::test]
async fn a_message_seen_before_never_settles_an_order() {
    let db = TestDatabase::create("first_verdict", &order_service::MIGRATOR).await;
    let mut conn = db.pool.acquire().await.expect("a connection");
    let order_id = pending_order(&db.pool).await;
    let seen = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO processed_messages (message_id, kind) VALUES ($1, 'inventory.reserved')",
    )
    .bind(seen)
    .execute(&db.pool)
    .await
    .expect("a recorded message");

    let outcome = settle::apply_first_verdict(
        &mut conn,
        order_id,
        Verdict::Reserved,
        seen,
        keys::INVENTORY_RESERVED,
    )
    .await
    .expect("runs");
    assert!(outcome.is_none());
    assert_eq!(
        status(&db.pool, order_id).await,
        "PENDING",
        "the update of the same statement was undone"
    );
}
