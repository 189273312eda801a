//! One scenario, each database: a test written once against [`Backend`] runs on PostgreSQL
//! and on MySQL / MariaDB ([`on_each_backend!`](crate::on_each_backend)), with a database of
//! the backend it was given ([`BackendDatabase`]). The services see only its URL; the test
//! reads the invariants back through the few queries here, in each dialect where they differ.

use platform::startup::Migrators;
pub use platform::storage::Backend;
use sqlx::{MySql, Postgres};

use crate::TestDatabase;
use crate::mysql::TestMySqlDatabase;

/// A database that exists for one test, on either backend, dropped with this guard.
#[derive(Debug)]
pub enum BackendDatabase {
    Postgres(TestDatabase),
    MySql(TestMySqlDatabase),
}

impl BackendDatabase {
    /// Creates a database for one test on `backend` and applies that backend's migrations (a
    /// service's `migrators()`).
    pub async fn create(backend: Backend, prefix: &str, migrations: Migrators<'_>) -> Self {
        match backend {
            Backend::Postgres => {
                Self::Postgres(TestDatabase::create(prefix, migrations.postgres).await)
            }
            Backend::MySql => {
                Self::MySql(TestMySqlDatabase::create(prefix, migrations.mysql).await)
            }
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Self::Postgres(_) => Backend::Postgres,
            Self::MySql(_) => Backend::MySql,
        }
    }

    /// The database as a service's code takes it, for tests that drive that code without
    /// the service.
    pub fn database(&self) -> platform::storage::Database {
        match self {
            Self::Postgres(db) => db.pool.clone().into(),
            Self::MySql(db) => platform::storage::Database::MySql(
                platform::storage::mysql::MySqlStore(db.pool.clone()),
            ),
        }
    }

    /// The URL a service is configured with.
    pub fn url(&self) -> &str {
        match self {
            Self::Postgres(db) => &db.url,
            Self::MySql(db) => &db.url,
        }
    }

    /// A number (a count, a stock) read with `sql`, a statement both dialects read alike
    /// (`SELECT count(*) …` with literal values).
    pub async fn count(&self, sql: &str) -> i64 {
        self.scalar(sql, sql).await
    }

    /// The one value the backend's own statement reads: `postgres` or `mysql`. For what the
    /// dialects spell differently (JSON paths, uuids, casts); values are written into the
    /// text, as a test's own literals.
    pub async fn scalar<T>(&self, postgres: &str, mysql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
        T: for<'r> sqlx::Decode<'r, MySql> + sqlx::Type<MySql>,
        T: Send + Unpin,
    {
        let read = match self {
            Self::Postgres(db) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(postgres.to_owned()))
                    .fetch_one(&db.pool)
                    .await
            }
            Self::MySql(db) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(mysql.to_owned()))
                    .fetch_one(&db.pool)
                    .await
            }
        };
        let sql = match self.backend() {
            Backend::Postgres => postgres,
            Backend::MySql => mysql,
        };
        read.unwrap_or_else(|error| panic!("{sql}: {error}"))
    }

    /// How many sessions of this database, other than the asking one, wait for a lock while
    /// running a statement that begins with `postgres` (PostgreSQL, as `pg_stat_activity`
    /// says; `""` for any statement) or with `mysql` (MySQL: running it is what is counted,
    /// which a test stages so that running is waiting, the rows it needs held by a
    /// transaction the test keeps open). MySQL's own list of lock waits
    /// (`information_schema.innodb_trx`) is a cache refreshed only once it has gone unread for
    /// 0.1 s, so a test polling it more often than that would never see it change.
    pub async fn lock_waits(&self, postgres: &str, mysql: &str) -> i64 {
        let like = |prefix: &str| format!("'{}%'", prefix.replace('\'', "''"));
        let postgres = format!(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND wait_event_type = 'Lock' AND query LIKE {}",
            like(postgres)
        );
        let mysql = format!(
            "SELECT count(*) FROM information_schema.processlist \
             WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info LIKE {}",
            like(mysql)
        );
        self.scalar(&postgres, &mysql).await
    }

    /// Runs `postgres` or `mysql`, a statement that changes rows; returns how many.
    pub async fn execute(&self, postgres: &str, mysql: &str) -> u64 {
        let done = match self {
            Self::Postgres(db) => sqlx::query(sqlx::AssertSqlSafe(postgres.to_owned()))
                .execute(&db.pool)
                .await
                .map(|done| done.rows_affected()),
            Self::MySql(db) => sqlx::query(sqlx::AssertSqlSafe(mysql.to_owned()))
                .execute(&db.pool)
                .await
                .map(|done| done.rows_affected()),
        };
        done.unwrap_or_else(|error| panic!("{postgres} / {mysql}: {error}"))
    }
}

/// Runs `sql` on `conn`, in the dialect of its backend: a statement of a writer other than the
/// code under test, typically inside a transaction the test holds open to stage a race.
pub async fn execute_on(conn: platform::storage::Conn<'_>, sql: &str) {
    use platform::storage::Conn;
    let statement = sqlx::AssertSqlSafe(sql.to_owned());
    match conn {
        Conn::Postgres(conn) => sqlx::query(statement).execute(conn).await.map(drop),
        Conn::MySql(conn) => sqlx::query(statement).execute(conn).await.map(drop),
    }
    .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// A uuid as each backend's statements compare it: PostgreSQL's `uuid`, MySQL's `BINARY(16)`
/// (the migrations' type for a uuid there).
pub fn uuid_literal(backend: Backend, id: &str) -> String {
    match backend {
        Backend::Postgres => format!("'{id}'::uuid"),
        Backend::MySql => format!("UNHEX(REPLACE('{id}', '-', ''))"),
    }
}

/// Each named scenario, an `async fn(Backend)` of the module, as two tests:
/// `<scenario>::postgres` and `<scenario>::mysql` (a module and a function may share a
/// name), so `cargo test` runs every one on both and names the backend that failed.
/// A test attribute may lead the list (`#[tokio::test(flavor = "multi_thread")]`); plain
/// `#[tokio::test]` otherwise.
#[macro_export]
macro_rules! on_each_backend {
    (#[$test:meta] $($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[$test]
                async fn postgres() {
                    super::$scenario($crate::Backend::Postgres).await;
                }

                #[$test]
                async fn mysql() {
                    super::$scenario($crate::Backend::MySql).await;
                }
            }
        )+
    };
    ($($scenario:ident),+ $(,)?) => {
        $crate::on_each_backend!(#[::tokio::test] $($scenario),+);
    };
}
