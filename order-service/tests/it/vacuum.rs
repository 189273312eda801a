//! With PostgreSQL's autovacuum off, the service vacuums the tables it churns itself; with it
//! on, it leaves them to autovacuum.

use std::time::Duration;

use sqlx::PgPool;
use testkit::{TestDatabase, eventually};
use tokio_util::sync::CancellationToken;

async fn manual_vacuums(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = $1")
        .bind(table)
        .fetch_one(pool)
        .await
        .expect("the table's statistics")
}

#[tokio::test]
async fn the_churned_tables_are_vacuumed_exactly_when_autovacuum_is_off() {
    let db = TestDatabase::create("vacuum", &order_service::MIGRATOR).await;
    let autovacuum: bool = sqlx::query_scalar("SELECT current_setting('autovacuum')::boolean")
        .fetch_one(&db.pool)
        .await
        .expect("the setting");
    let stop = CancellationToken::new();
    let task = tokio::spawn(platform::storage::vacuum::run(
        db.pool.clone(),
        &["orders"],
        Duration::from_millis(100),
        stop.clone(),
    ));

    if autovacuum {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for table in ["outbox", "processed_messages", "orders"] {
            assert_eq!(manual_vacuums(&db.pool, table).await, 0, "{table}");
        }
    } else {
        for table in ["outbox", "processed_messages", "orders"] {
            eventually(Duration::from_secs(10), || async {
                (manual_vacuums(&db.pool, table).await > 0).then_some(())
            })
            .await;
        }
    }
    stop.cancel();
    task.await.expect("the loop stops");
}
