//! Isolation on the real MySQL / MariaDB: a database per test, created with the service's
//! MySQL migrations and dropped with its guard, as [`crate::TestDatabase`] does on PostgreSQL.

use sqlx::migrate::Migrator;
use sqlx::{Connection, MySqlConnection, MySqlPool};
use uuid::Uuid;

/// Server URL the MySQL test databases are created on (`TEST_MYSQL_SERVER` overrides).
pub fn mysql_server() -> String {
    platform::config::string("TEST_MYSQL_SERVER", "mysql://root@127.0.0.1:3306")
}

/// A MySQL database that exists for one test and is dropped with this guard.
#[derive(Debug)]
pub struct TestMySqlDatabase {
    pub name: String,
    pub url: String,
    pub pool: MySqlPool,
}

impl TestMySqlDatabase {
    /// Creates `t_<prefix>_<random>` the way a service creates its database, and applies
    /// `migrator`.
    pub async fn create(prefix: &str, migrator: &Migrator) -> Self {
        let name = format!("t_{}_{}", prefix.replace('-', "_"), Uuid::new_v4().simple());
        let url = format!("{}/{name}", mysql_server());
        let pool = platform::storage::mysql::connect_and_migrate(
            &url,
            &platform::storage::postgres::PoolSettings::default(),
            migrator,
        )
        .await
        .expect("MySQL test database");
        Self { name, url, pool }
    }
}

impl Drop for TestMySqlDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let server = mysql_server();
        crate::isolation::on_a_runtime_of_its_own(async move {
            let Ok(mut conn) = MySqlConnection::connect(&server).await else {
                return;
            };
            // The test's own sessions end first: one left inside a transaction (a test that
            // panicked) would hold the drop on its metadata locks. (ID is unsigned: cast.)
            let sessions: Vec<i64> = sqlx::query_scalar(
                "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST
                 WHERE DB = ? AND ID <> CONNECTION_ID()",
            )
            .bind(&name)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
            for session in sessions {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!("KILL {session}")))
                    .execute(&mut conn)
                    .await;
            }
            // Never wait for ever (the default: a year) on a metadata lock.
            let _ = sqlx::query("SET SESSION lock_wait_timeout = 10")
                .execute(&mut conn)
                .await;
            let sql = format!("DROP DATABASE IF EXISTS `{name}`");
            if let Err(error) = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
            {
                eprintln!("cannot drop the test database {name}: {error}");
            }
        });
    }
}
