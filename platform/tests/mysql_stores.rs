//! docs/database-backends.md: the consumer loop's store on MySQL / MariaDB counts failures
//! per message id, an id given twice in one call once, and says whether the database
//! answers. The statements themselves are tested in `stores/platform-mysql/tests`.

use platform::messaging::consumer::ConsumerStore;
use platform::storage::mysql::MySqlStore;
use testkit::mysql::TestMySqlDatabase;
use uuid::Uuid;

static ORDERS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/order-service/mysql");

#[tokio::test]
async fn the_consumer_store_counts_an_id_given_twice_once() {
    let db = TestMySqlDatabase::create("mysql_stores", &ORDERS).await;
    let store = MySqlStore(db.pool.clone());
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let first = store
        .count_failures(&[(a, "one".into()), (b, "one".into())])
        .await
        .expect("count");
    assert_eq!((first.get(&a), first.get(&b)), (Some(&1), Some(&1)));
    let counts = store
        .count_failures(&[(b, "x".into()), (b, "y".into())])
        .await
        .expect("count");
    assert_eq!(counts.get(&b), Some(&2));
    assert!(store.answers().await);
}
