//! docs/database-backends.md: with `DATABASE_URLS` naming a MySQL primary and its replica,
//! the pool follows a failover while the service runs: writes move to the replica once it
//! is promoted and the primary is made read-only or dies, and they never go back to an old
//! primary that comes back writable. Two private MariaDB servers ([`MariaDbNode`]) per test,
//! whose `read_only` the test turns as a failover would; the replication itself is left
//! out: each server gets the database and its migrations up front, and the rows are
//! counted on each server directly.

use std::time::Duration;

use platform::storage::mysql;
use platform::storage::postgres::PoolSettings;
use sqlx::MySqlPool;
use sqlx::migrate::Migrator;
use testkit::eventually;
use testkit::mariadb::MariaDbNode;

static ORDERS: Migrator = sqlx::migrate!("../migrations/order-service/mysql");

/// Five of the watcher's checks: by then it has seen what the test made of a server, even
/// on a machine busy with the rest of the suite.
const NOTICED_WITHIN: Duration = Duration::from_secs(5);

/// Well past the watcher's check, and the acquire timeout of the writes waiting on it.
const SWITCH_WITHIN: Duration = Duration::from_secs(15);

/// A primary and its replica, and a service's pool connected through `DATABASE_URLS` of
/// both, primary first.
struct Failover {
    /// `None` once it died.
    primary: Option<MariaDbNode>,
    replica: MariaDbNode,
    database: String,
    pool: MySqlPool,
}

/// Two servers started at once: each takes a few seconds to bootstrap.
fn two_servers() -> (MariaDbNode, MariaDbNode) {
    let other = std::thread::spawn(|| MariaDbNode::start(&[]));
    let first = MariaDbNode::start(&[]);
    (first, other.join().expect("the second server starts"))
}

/// The service connected to the primary, the replica standing by read-only with the same
/// database and schema (as replication would have given it), one row written.
async fn a_primary_and_its_replica(prefix: &str) -> Failover {
    let (primary, replica) = two_servers();
    let database = format!("t_{prefix}_{}", uuid::Uuid::new_v4().simple());
    let settings = PoolSettings::default();
    mysql::connect_and_migrate(&replica.url(&database), &settings, &ORDERS)
        .await
        .expect("the replica's copy of the database")
        .close()
        .await;
    replica.sql("SET GLOBAL read_only = 1");
    let urls = [primary.url(&database), replica.url(&database)];
    let pool = mysql::connect_and_migrate_any(&urls, &settings, &ORDERS)
        .await
        .expect("the primary takes writes");
    let failover = Failover {
        primary: Some(primary),
        replica,
        database,
        pool,
    };
    write(&failover.pool).await.expect("a write");
    assert_eq!(failover.on_primary(), 1, "on the primary");
    assert_eq!(failover.rows(&failover.replica), 0, "not on the replica");
    failover
}

impl Failover {
    /// How many rows the service wrote to `server`.
    fn rows(&self, server: &MariaDbNode) -> u64 {
        let sql = format!(
            "SELECT COUNT(*) FROM `{}`.processed_messages",
            self.database
        );
        server.sql(&sql).parse().expect("a count")
    }

    /// How many rows the service wrote to the primary that are still there: none once it
    /// died.
    fn on_primary(&self) -> u64 {
        self.primary
            .as_ref()
            .map_or(0, |primary| self.rows(primary))
    }

    fn primary(&self) -> &MariaDbNode {
        self.primary.as_ref().expect("the primary is up")
    }

    /// Writes `count` rows, `pause` apart, and checks that all went to the replica and none
    /// to the primary.
    async fn all_writes_land_on_the_replica(&self, count: u64, pause: Duration) {
        let (on_primary, on_replica) = (self.on_primary(), self.rows(&self.replica));
        for _ in 0..count {
            write(&self.pool)
                .await
                .expect("the replica takes the write");
            tokio::time::sleep(pause).await;
        }
        assert_eq!(
            self.on_primary(),
            on_primary,
            "a write went to the old primary"
        );
        assert_eq!(self.rows(&self.replica), on_replica + count);
    }
}

/// One row through the service's pool.
async fn write(pool: &MySqlPool) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES (?, 'failover')")
        .bind(uuid::Uuid::new_v4())
        .execute(pool)
        .await
        .map(drop)
}

#[tokio::test]
async fn the_pool_follows_a_switchover_and_never_goes_back_to_the_old_primary() {
    let failover = a_primary_and_its_replica("mysql_switchover").await;

    // A switchover: the primary made read-only, then, a moment later, the replica promoted.
    // Nothing refuses root's writes on the old primary: only the pool's reading of
    // `read_only` keeps them off it. Once the watcher has seen it, a write waits for a
    // server that takes writes rather than going to the old one.
    failover.primary().sql("SET GLOBAL read_only = 1");
    tokio::time::sleep(NOTICED_WITHIN).await;
    let pool = failover.pool.clone();
    let waiting = tokio::spawn(async move { write(&pool).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the write did not wait for a server that takes writes: written to the old \
         primary, or failed"
    );
    failover.replica.sql("SET GLOBAL read_only = 0");
    waiting
        .await
        .expect("the writing task")
        .expect("the write waited for the promoted replica");
    assert_eq!(
        failover.rows(&failover.replica),
        1,
        "on the promoted replica"
    );
    assert_eq!(failover.on_primary(), 1, "a write went to the old primary");
    failover
        .all_writes_land_on_the_replica(20, Duration::ZERO)
        .await;

    // The old primary writable again, earlier in the list: a split brain the pool must not
    // join. Writing across a few of the watcher's checks, all still on the replica.
    failover.primary().sql("SET GLOBAL read_only = 0");
    failover
        .all_writes_land_on_the_replica(25, Duration::from_millis(100))
        .await;

    // Even when the watcher loses its session to the replica and asks every server again:
    // the replica still takes writes, so it is kept, though the old primary comes first.
    let on_primary = failover.on_primary();
    failover.replica.kill_client_sessions();
    eventually(SWITCH_WITHIN, || async {
        // The pool's own sessions died too: their first statements fail.
        write(&failover.pool).await.ok()
    })
    .await;
    failover
        .all_writes_land_on_the_replica(25, Duration::from_millis(100))
        .await;
    assert_eq!(
        failover.on_primary(),
        on_primary,
        "a write went to the old primary"
    );
}

#[tokio::test]
async fn the_pool_follows_the_replica_promoted_when_the_primary_dies() {
    let mut failover = a_primary_and_its_replica("mysql_failover").await;

    // Killed, as a crash ends it; then the replica promoted.
    drop(failover.primary.take());
    failover.replica.sql("SET GLOBAL read_only = 0");
    // The first writes may fail: a session on the dead server fails its statement.
    eventually(SWITCH_WITHIN, || {
        let failover = &failover;
        async move {
            write(&failover.pool).await.ok();
            (failover.rows(&failover.replica) > 0).then_some(())
        }
    })
    .await;
    failover
        .all_writes_land_on_the_replica(10, Duration::ZERO)
        .await;
}

/// A connection the pool began opening to the primary before the switch can reach it after,
/// when that server takes writes again (an old primary brought back writable): asking it
/// whether it takes writes, and when, is not enough. Its identity refuses it.
#[tokio::test]
async fn a_session_that_reaches_the_server_just_left_is_refused_even_when_it_takes_writes() {
    use std::sync::Arc;

    use platform::storage::mysql::writer::Writer;
    use sqlx::ConnectOptions;
    use sqlx::mysql::MySqlPoolOptions;

    let (primary, replica) = two_servers();
    replica.sql("SET GLOBAL read_only = 1");
    let urls = [primary.url("mysql"), replica.url("mysql")];
    let (writer, found) = Writer::find(&urls).await.expect("readable URLs");
    let found = found.expect("the primary takes writes");
    assert_eq!(found.index, 0);
    let writer = Arc::new(writer);
    let pool = MySqlPoolOptions::new().connect_lazy_with(writer.server(0).clone());
    tokio::spawn(Arc::clone(&writer).watch(pool.clone(), found));

    // The switchover, as the watcher sees it.
    primary.sql("SET GLOBAL read_only = 1");
    replica.sql("SET GLOBAL read_only = 0");
    eventually(NOTICED_WITHIN, || {
        let port = pool.connect_options().get_port();
        async move { (port == replica.port).then_some(()) }
    })
    .await;

    // The old primary writable again, and a session that reached it late.
    primary.sql("SET GLOBAL read_only = 0");
    let mut late = writer.server(0).connect().await.expect("a session");
    let refused = writer
        .admit(&mut late)
        .await
        .expect_err("a session on the server the pool left is refused");
    assert!(
        refused
            .to_string()
            .contains("not the server the pool writes to"),
        "{refused}"
    );
    let mut current = writer.server(1).connect().await.expect("a session");
    writer
        .admit(&mut current)
        .await
        .expect("a session on the chosen server is admitted");
    assert_eq!(
        pool.connect_options().get_port(),
        replica.port,
        "the pool stays on the promoted replica"
    );
}
