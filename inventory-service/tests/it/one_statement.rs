//! The consumer's one-statement writes either do the whole job or write nothing at all,
//! whatever stops them: a short stock, a taken id, a tombstone. (The deduction batch's
//! statement is tested in `deduction_batch`.)

use inventory_service::db::one_statement::{self, Attempt};
use platform::http::TraceContext;
use platform::outbox::NewOutboxRow;
use platform::testing::TestDatabase;
use shared::events::{Envelope, InventoryEvent, LineItem, RejectionReason, StockReserved};
use shared::ids::{OrderId, ProductId};
use shared::keys;
use sqlx::PgPool;
use uuid::Uuid;

const PRODUCT: i64 = 7;

async fn database_with_stock(stock: i64) -> TestDatabase {
    let db = TestDatabase::create("one_statement", &inventory_service::MIGRATOR).await;
    sqlx::query("INSERT INTO products (product_id, name, stock) VALUES ($1, 'widget', $2)")
        .bind(PRODUCT)
        .bind(stock)
        .execute(&db.pool)
        .await
        .expect("a product");
    db
}

fn item(quantity: i64) -> LineItem {
    LineItem {
        product_id: ProductId(PRODUCT),
        quantity,
    }
}

async fn stock_and_version(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("SELECT stock, version FROM products WHERE product_id = $1")
        .bind(PRODUCT)
        .fetch_one(pool)
        .await
        .expect("the product")
}

async fn count(pool: &PgPool, table: &'static str) -> i64 {
    // The table names are this file's own constants.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .expect("a count")
}

fn reserved_event(order_id: OrderId) -> NewOutboxRow {
    let event = InventoryEvent::Reserved(StockReserved {
        order_id,
        items: vec![item(2)],
    });
    NewOutboxRow::new(
        keys::INVENTORY_EXCHANGE,
        &Envelope::new(event),
        &TraceContext::new_root(),
    )
    .expect("an outbox row")
}

async fn reserve(pool: &PgPool, order_id: OrderId, message_id: Uuid, quantity: i64) -> Attempt {
    let mut conn = pool.acquire().await.expect("a connection");
    one_statement::reserve(
        &mut conn,
        order_id,
        item(quantity),
        message_id,
        keys::ORDER_CREATED,
        reserved_event(order_id),
    )
    .await
    .expect("the statement runs")
}

#[tokio::test]
async fn a_reservation_writes_every_row_at_once() {
    let db = database_with_stock(5).await;
    let order_id = OrderId::new();
    assert_eq!(
        reserve(&db.pool, order_id, Uuid::new_v4(), 2).await,
        Attempt::Done
    );
    assert_eq!(stock_and_version(&db.pool).await, (3, 1));
    let (state, items): (String, serde_json::Value) =
        sqlx::query_as("SELECT state, items FROM reservations WHERE order_id = $1")
            .bind(order_id.0)
            .fetch_one(&db.pool)
            .await
            .expect("the reservation");
    assert_eq!(state, "APPLIED");
    assert_eq!(
        items,
        serde_json::json!([{"product_id": PRODUCT, "quantity": 2}])
    );
    assert_eq!(count(&db.pool, "processed_messages").await, 1);
    assert_eq!(count(&db.pool, "outbox").await, 1);
}

#[tokio::test]
async fn a_tombstone_or_a_seen_message_makes_a_reservation_write_nothing() {
    let db = database_with_stock(5).await;
    let cancelled_first = OrderId::new();
    sqlx::query("INSERT INTO reservations (order_id, state) VALUES ($1, 'CANCELLED')")
        .bind(cancelled_first.0)
        .execute(&db.pool)
        .await
        .expect("a tombstone");
    assert_eq!(
        reserve(&db.pool, cancelled_first, Uuid::new_v4(), 2).await,
        Attempt::NotTaken
    );

    let seen = Uuid::new_v4();
    sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES ($1, 'order.created')")
        .bind(seen)
        .execute(&db.pool)
        .await
        .expect("a recorded message");
    let other_order = OrderId::new();
    assert_eq!(
        reserve(&db.pool, other_order, seen, 2).await,
        Attempt::NotTaken
    );

    assert_eq!(
        stock_and_version(&db.pool).await,
        (5, 0),
        "nothing deducted"
    );
    assert_eq!(
        count(&db.pool, "reservations").await,
        1,
        "only the tombstone"
    );
    assert_eq!(count(&db.pool, "processed_messages").await, 1);
    assert_eq!(count(&db.pool, "outbox").await, 0);
}

#[tokio::test]
async fn a_rejection_is_written_once() {
    let db = database_with_stock(0).await;
    let order_id = OrderId::new();
    let reject = |message_id: Uuid| {
        let pool = db.pool.clone();
        async move {
            let mut conn = pool.acquire().await.expect("a connection");
            let event = InventoryEvent::Rejected(shared::events::StockRejected {
                order_id,
                reason: RejectionReason::InsufficientStock,
            });
            let row = NewOutboxRow::new(
                keys::INVENTORY_EXCHANGE,
                &Envelope::new(event),
                &TraceContext::new_root(),
            )
            .expect("an outbox row");
            one_statement::reject(
                &mut conn,
                order_id,
                &[item(2)],
                RejectionReason::InsufficientStock,
                message_id,
                keys::ORDER_CREATED,
                row,
            )
            .await
            .expect("the statement runs")
        }
    };
    assert_eq!(reject(Uuid::new_v4()).await, Attempt::Done);
    assert_eq!(reject(Uuid::new_v4()).await, Attempt::NotTaken);
    assert_eq!(count(&db.pool, "reservations").await, 1);
    assert_eq!(count(&db.pool, "processed_messages").await, 1);
    assert_eq!(count(&db.pool, "outbox").await, 1);
}
