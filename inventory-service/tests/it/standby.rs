//! `DATABASE_URLS` naming a primary and its synchronous standby, on a pair each test starts:
//! the pool writes to the primary wherever it is listed, follows the standby once the
//! primary stops (or refuses writes, SQLSTATE 25006) and the standby is promoted, with no
//! restart, keeps what was committed before, and does not go back to the old primary when
//! it returns.

use std::time::Duration;

use platform::storage::postgres::{PoolSettings, connect_and_migrate};
use sqlx::PgPool;
use testkit::eventually;
use testkit::standby::PrivateStandby;

/// The port of the server `pool`'s connections talk to.
async fn server_port(pool: &PgPool) -> u16 {
    let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
        .fetch_one(pool)
        .await
        .expect("the server's port");
    u16::try_from(port).expect("a port")
}

async fn write(pool: &PgPool, mark: i32) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO switch_marks (mark) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(mark)
        .execute(pool)
        .await
        .map(drop)
}

/// Once the pool has moved to the promoted standby: mark 2 is written there (requests fail
/// while the pool still holds to the old primary), beside mark 1 from before the switch.
async fn await_writes_on_the_new_primary(pool: &PgPool, pair: &PrivateStandby) {
    eventually(Duration::from_secs(60), || async {
        write(pool, 2).await.ok()
    })
    .await;
    assert_eq!(server_port(pool).await, pair.standby.port);
    let marks: Vec<i32> = sqlx::query_scalar("SELECT mark FROM switch_marks ORDER BY mark")
        .fetch_all(pool)
        .await
        .expect("read the marks");
    assert_eq!(
        marks,
        [1, 2],
        "the commit of before the switch is on the new primary"
    );
}

/// A table of marks on `pool`'s primary, holding mark 1.
async fn first_mark(pool: &PgPool) {
    sqlx::query("CREATE TABLE switch_marks (mark int PRIMARY KEY)")
        .execute(pool)
        .await
        .expect("create a table");
    write(pool, 1).await.expect("a write on the primary");
}

async fn connect(urls: &[String]) -> PgPool {
    connect_and_migrate(urls, &PoolSettings::default(), &inventory_service::MIGRATOR)
        .await
        .expect("connects to the primary")
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_follow_the_standby_promoted_after_the_primary_stops_and_never_go_back() {
    let pair = tokio::task::spawn_blocking(PrivateStandby::start)
        .await
        .expect("the pair starts");
    let urls = pair.urls("inventory");
    let standby_first: Vec<String> = urls.iter().rev().cloned().collect();
    let pool = connect(&standby_first).await;
    assert_eq!(
        server_port(&pool).await,
        pair.primary.port,
        "the standby is skipped"
    );
    first_mark(&pool).await;

    tokio::task::block_in_place(|| pair.fail_over("fast"));
    await_writes_on_the_new_primary(&pool, &pair).await;

    // The old primary comes back as a primary (on the timeline it left): a pool started now
    // with it first in the list still chooses the promoted standby, and the pool that
    // followed the switch stays there.
    tokio::task::block_in_place(|| pair.primary.start());
    let fresh = connect(&urls).await;
    assert_eq!(server_port(&fresh).await, pair.standby.port);
    tokio::time::sleep(platform::storage::postgres::primary::CHECK_EVERY * 2).await;
    write(&pool, 3)
        .await
        .expect("a write after the old primary is back");
    assert_eq!(server_port(&pool).await, pair.standby.port);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_made_read_only_under_open_sessions_is_left_for_the_host_that_takes_writes() {
    let pair = tokio::task::spawn_blocking(PrivateStandby::start)
        .await
        .expect("the pair starts");
    let pool = connect(&pair.urls("inventory")).await;
    first_mark(&pool).await;

    // Read-only from their next transaction on, for the sessions the pool holds too.
    tokio::task::block_in_place(|| {
        pair.primary
            .psql("ALTER SYSTEM SET default_transaction_read_only = on");
        pair.primary.psql("SELECT pg_reload_conf()");
    });
    eventually(Duration::from_secs(10), || async {
        let on = tokio::task::block_in_place(|| {
            pair.primary.psql("SHOW default_transaction_read_only") == "on"
        });
        on.then_some(())
    })
    .await;
    let refused = write(&pool, 2)
        .await
        .expect_err("a read-only primary refuses writes");
    let code = refused.as_database_error().and_then(|e| e.code());
    assert_eq!(code.as_deref(), Some("25006"), "{refused}");

    // Nothing takes writes until the standby is promoted; then the pool moves to it.
    tokio::task::block_in_place(|| pair.standby.promote());
    await_writes_on_the_new_primary(&pool, &pair).await;
}
