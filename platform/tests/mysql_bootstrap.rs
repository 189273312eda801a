//! docs/database-backends.md: a service's database on MySQL / MariaDB is created when
//! missing, migrated once however many instances start at once, compares text byte for byte,
//! every pooled session has the settings the services rely on, and `DATABASE_URLS` lead to
//! the server that takes writes. Against the machine's MariaDB (`TEST_MYSQL_SERVER`), a
//! database per test; a MariaDB of the test's own ([`MariaDbNode`]) where it needs a second
//! server, a read-only one above all.

use std::time::Duration;

use platform::storage::mysql::{self, IDLE_TRANSACTION_TIMEOUT_SECS, LOCK_WAIT_TIMEOUT_SECS};
use platform::storage::postgres::PoolSettings;
use platform::storage::{Backend, is_contention, is_lock_timeout};
use sqlx::migrate::Migrator;
use sqlx::{ConnectOptions, Connection, MySqlConnection, MySqlPool};
use testkit::mariadb::MariaDbNode;
use testkit::mysql::{TestMySqlDatabase, mysql_server};

static ORDERS: Migrator = sqlx::migrate!("../migrations/order-service/mysql");

async fn scalar_string(pool: &MySqlPool, sql: &'static str) -> String {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test]
async fn a_missing_database_is_created_with_text_compared_byte_for_byte() {
    let db = TestMySqlDatabase::create("mysql_boot", &ORDERS).await;
    let collation: String = sqlx::query_scalar(
        "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .expect("the database exists");
    assert!(
        ["utf8mb4_nopad_bin", "utf8mb4_0900_bin"].contains(&collation.as_str()),
        "{collation}"
    );
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&db.pool)
        .await
        .expect("sqlx's migration table");
    assert_eq!(applied, ORDERS.iter().count() as i64);

    // Keys that differ by case or a trailing space are different keys, as on PostgreSQL.
    for id in ["Ab", "ab", "ab "] {
        sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES (?, ?)")
            .bind(uuid::Uuid::new_v4())
            .bind(id)
            .execute(&db.pool)
            .await
            .expect("insert");
    }
    let matching: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM processed_messages WHERE kind = 'ab'")
            .fetch_one(&db.pool)
            .await
            .expect("count");
    assert_eq!(matching, 1, "'ab' matches itself only, not 'Ab' or 'ab '");
}

#[tokio::test]
async fn instances_starting_at_once_migrate_the_new_database_once() {
    let name = format!("t_mysql_race_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}/{name}", mysql_server());
    let starts = (0..3).map(|_| {
        let url = url.clone();
        tokio::spawn(async move {
            mysql::connect_and_migrate(&url, &PoolSettings::default(), &ORDERS).await
        })
    });
    let pools: Vec<MySqlPool> = futures_util::future::join_all(starts)
        .await
        .into_iter()
        .map(|started| started.expect("task").expect("every instance starts"))
        .collect();
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&pools[0])
        .await
        .expect("sqlx's migration table");
    assert_eq!(applied, ORDERS.iter().count() as i64, "each migration once");
    for pool in pools {
        pool.close().await;
    }
    let mut admin = MySqlConnection::connect(&mysql_server())
        .await
        .expect("admin");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE `{name}`")))
        .execute(&mut admin)
        .await
        .expect("drop");
}

#[tokio::test]
async fn pooled_sessions_read_committed_in_utc_strictly_and_bounded() {
    let db = TestMySqlDatabase::create("mysql_session", &ORDERS).await;
    let isolation = scalar_string(&db.pool, "SELECT @@SESSION.tx_isolation").await;
    assert_eq!(isolation, "READ-COMMITTED");
    let zone = scalar_string(&db.pool, "SELECT @@SESSION.time_zone").await;
    assert_eq!(zone, "+00:00");
    let mode = scalar_string(&db.pool, "SELECT @@SESSION.sql_mode").await;
    assert!(mode.contains("STRICT_ALL_TABLES"), "{mode}");
    let wait: u64 = sqlx::query_scalar("SELECT @@SESSION.innodb_lock_wait_timeout")
        .fetch_one(&db.pool)
        .await
        .expect("innodb_lock_wait_timeout");
    assert_eq!(wait, u64::from(LOCK_WAIT_TIMEOUT_SECS));
    let idle: u64 = sqlx::query_scalar("SELECT @@SESSION.idle_transaction_timeout")
        .fetch_one(&db.pool)
        .await
        .expect("MariaDB's idle_transaction_timeout");
    assert_eq!(idle, u64::from(IDLE_TRANSACTION_TIMEOUT_SECS));

    // Strict: a value that does not fit is refused, not cut short with a warning.
    let too_long = "x".repeat(40);
    let refused = sqlx::query(
        "INSERT INTO outbox (event_id, exchange, routing_key, payload, status) \
         VALUES (?, 'e', 'k', '{}', ?)",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(&too_long)
    .execute(&db.pool)
    .await
    .expect_err("a status longer than its column");
    assert!(refused.to_string().contains("too long"), "{refused}");
}

#[tokio::test]
async fn a_row_held_past_the_lock_wait_is_contention_not_a_hang() {
    let db = TestMySqlDatabase::create("mysql_lock", &ORDERS).await;
    let id = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES (?, 'held')")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("insert");
    let mut holder = db.pool.begin().await.expect("holder");
    sqlx::query("SELECT kind FROM processed_messages WHERE message_id = ? FOR UPDATE")
        .bind(id)
        .fetch_one(&mut *holder)
        .await
        .expect("lock");
    let mut waiter = db.pool.begin().await.expect("waiter");
    let waited = tokio::time::timeout(
        Duration::from_secs(30),
        sqlx::query("SELECT kind FROM processed_messages WHERE message_id = ? FOR UPDATE")
            .bind(id)
            .fetch_one(&mut *waiter),
    )
    .await
    .expect("the wait is bounded by the session's lock wait timeout, not the server's 50 s");
    let error = waited.expect_err("the row stays locked");
    assert!(is_lock_timeout(&error), "{error}");
    assert!(is_contention(&error), "{error}");
    // Both ended here: an open transaction would hold its tables' metadata locks, and the
    // database's drop would wait for them.
    waiter.rollback().await.expect("rollback");
    holder.rollback().await.expect("rollback");
}

#[tokio::test]
async fn tls_is_used_only_when_the_url_asks_for_it() {
    let base = mysql_server();
    let mut plain = mysql::connect_options(&base)
        .expect("a URL")
        .connect()
        .await
        .expect("a connection");
    let cipher: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&mut plain)
        .await
        .expect("Ssl_cipher");
    assert_eq!(cipher.1, "", "no ssl-mode: plain text");
    let have_ssl: (String, String) = sqlx::query_as("SHOW VARIABLES LIKE 'have_ssl'")
        .fetch_one(&mut plain)
        .await
        .expect("have_ssl");
    plain.close().await.expect("close");

    let required = mysql::connect_options(&format!("{base}?ssl-mode=REQUIRED"))
        .expect("a URL")
        .connect()
        .await;
    if have_ssl.1 == "YES" {
        let mut conn = required.expect("TLS when asked");
        let cipher: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            .fetch_one(&mut conn)
            .await
            .expect("Ssl_cipher");
        assert_ne!(cipher.1, "", "ssl-mode=REQUIRED: encrypted");
    } else {
        // Asked for and not available: refused, never quietly plain.
        assert!(
            required.is_err(),
            "ssl-mode=REQUIRED against a server without TLS"
        );
    }
}

#[test]
fn the_backend_is_told_by_the_scheme() {
    for (url, backend) in [
        ("postgres://u@h/db", Backend::Postgres),
        ("postgresql://u@h/db", Backend::Postgres),
        ("mysql://u@h/db", Backend::MySql),
        ("MariaDB://u@h/db", Backend::MySql),
    ] {
        assert_eq!(Backend::of_url(url).expect(url), backend, "{url}");
    }
    assert_eq!(Backend::MySql.name(), "mysql");
    let refusal = Backend::of_url("sqlite://u:secret@h/db")
        .expect_err("unknown")
        .to_string();
    assert!(refusal.contains("sqlite://"), "{refusal}");
    assert!(!refusal.contains("secret"), "{refusal}");
}

#[tokio::test]
async fn database_urls_lead_to_the_server_that_takes_writes() {
    let db = TestMySqlDatabase::create("mysql_boot_urls", &ORDERS).await;
    // Nothing listens on port 1: that server is down, as a failed primary is.
    let down = format!("mysql://root@127.0.0.1:1/{}", db.name);
    let urls = [down.clone(), db.url.clone()];
    let pool = mysql::connect_and_migrate_any(&urls, &PoolSettings::default(), &ORDERS)
        .await
        .expect("the server that answers and takes writes");
    assert_eq!(scalar_string(&pool, "SELECT DATABASE()").await, db.name);
    let none =
        mysql::connect_and_migrate_any(&[down.clone(), down], &PoolSettings::default(), &ORDERS)
            .await
            .expect_err("no server takes writes");
    assert!(format!("{none:#}").contains("takes writes"), "{none:#}");
}

/// The port of the machine's server (`TEST_MYSQL_SERVER`), as it reports it.
async fn machine_port() -> i64 {
    let mut admin = MySqlConnection::connect(&mysql_server())
        .await
        .expect("the machine's MariaDB");
    sqlx::query_scalar("SELECT CAST(@@port AS SIGNED)")
        .fetch_one(&mut admin)
        .await
        .expect("@@port")
}

/// The port of the server behind `pool`: which one of the URLs was picked.
async fn port_of(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT CAST(@@port AS SIGNED)")
        .fetch_one(pool)
        .await
        .expect("@@port")
}

/// What the service connects to with `DATABASE_URLS` of `first` (a private server) and then
/// the machine's server, for a fresh database. Held by a guard that drops the database from
/// the machine's server, whichever server was picked; the private server's goes with its
/// directory.
async fn pick_between(first: &MariaDbNode, prefix: &str) -> TestMySqlDatabase {
    let name = format!("t_{prefix}_{}", uuid::Uuid::new_v4().simple());
    let on_machine = format!("{}/{name}", mysql_server());
    let urls = [first.url(&name), on_machine.clone()];
    let pool = mysql::connect_and_migrate_any(&urls, &PoolSettings::default(), &ORDERS)
        .await
        .expect("a server that takes writes");
    TestMySqlDatabase {
        name,
        url: on_machine,
        pool,
    }
}

/// Writes a row of `kind` to `processed_messages` through the service's pool.
async fn write_through(pool: &MySqlPool, kind: &str) {
    sqlx::query("INSERT INTO processed_messages (message_id, kind) VALUES (?, ?)")
        .bind(uuid::Uuid::new_v4())
        .bind(kind)
        .execute(pool)
        .await
        .expect("the picked server takes the write");
}

/// How many databases named `name` a server has: 0 or 1.
fn schemata(name: &str) -> String {
    format!("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{name}'")
}

#[tokio::test]
async fn database_urls_pass_over_a_server_that_is_up_but_read_only() {
    // A replica as MariaDB runs one: up, answering, `read_only` on. Listed first.
    let replica = MariaDbNode::start(&["--read-only"]);
    assert_eq!(replica.sql("SELECT @@global.read_only"), "1");
    let db = pick_between(&replica, "mysql_ro").await;

    assert_eq!(port_of(&db.pool).await, machine_port().await);
    assert_ne!(port_of(&db.pool).await, i64::from(replica.port));
    write_through(&db.pool, "on the primary").await;
    let mut admin = MySqlConnection::connect(&mysql_server())
        .await
        .expect("the machine's MariaDB");
    let landed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM `{}`.processed_messages WHERE kind = 'on the primary'",
        db.name
    )))
    .fetch_one(&mut admin)
    .await
    .expect("the service's table on the machine's server");
    assert_eq!(landed, 1);

    // Nothing of the service's reached the replica: not even its database.
    assert_eq!(
        replica.sql(&schemata(&db.name)),
        "0",
        "the read-only server was written to"
    );
    // And `read_only` alone would not have kept it out: root holds READ_ONLY ADMIN (part of
    // ALL PRIVILEGES), so on the replica the database and the migrations would have gone
    // through. Only the `@@read_only` check sent the service to the other server.
    replica.sql("CREATE DATABASE root_writes_despite_read_only");
}

#[tokio::test]
async fn database_urls_lead_to_the_first_of_two_servers_that_take_writes() {
    // The same list as above with the private server writable: this time it is the one
    // picked, so the test above passes for `read_only`, not for the servers' places.
    let first = MariaDbNode::start(&[]);
    let db = pick_between(&first, "mysql_rw").await;

    assert_eq!(port_of(&db.pool).await, i64::from(first.port));
    write_through(&db.pool, "on the first").await;
    assert_eq!(
        first.sql(&format!(
            "SELECT COUNT(*) FROM `{}`.processed_messages WHERE kind = 'on the first'",
            db.name
        )),
        "1"
    );
    let mut admin = MySqlConnection::connect(&mysql_server())
        .await
        .expect("the machine's MariaDB");
    let on_the_second: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(schemata(&db.name)))
        .fetch_one(&mut admin)
        .await
        .expect("the machine's schemata");
    assert_eq!(on_the_second, 0, "the second server was written to");
}
