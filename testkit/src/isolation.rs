//! Isolation against the real PostgreSQL, Redis and RabbitMQ: every test gets its own database,
//! its own Redis key prefix and its own AMQP vhost, so tests run in parallel and repeat without
//! seeing each other.

use std::process::Command;

use sqlx::migrate::Migrator;
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

/// Server URL the test databases are created on (`TEST_DATABASE_SERVER` overrides).
pub fn database_server() -> String {
    platform::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432")
}

pub fn redis_url() -> String {
    platform::config::string("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
}

pub fn amqp_server() -> String {
    platform::config::string("TEST_AMQP_SERVER", "amqp://guest:guest@127.0.0.1:5672")
}

/// A database that exists for one test and is dropped with this guard.
#[derive(Debug)]
pub struct TestDatabase {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl TestDatabase {
    /// Creates `t_<prefix>_<random>` and applies `migrator`.
    pub async fn create(prefix: &str, migrator: &Migrator) -> Self {
        let name = format!("t_{}_{}", prefix.replace('-', "_"), Uuid::new_v4().simple());
        let url = format!("{}/{name}", database_server());
        let pool = platform::storage::postgres::connect_and_migrate(
            std::slice::from_ref(&url),
            &platform::storage::postgres::PoolSettings::default(),
            migrator,
        )
        .await
        .expect("test database");
        Self { name, url, pool }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let server = database_server();
        on_a_runtime_of_its_own(async move {
            if let Ok(mut conn) = PgConnection::connect(&format!("{server}/postgres")).await {
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await;
            }
        });
    }
}

/// Runs `work` to its end on a thread and a runtime of its own: a guard's `drop` may run
/// inside the test's runtime, which cannot be blocked on from within.
pub(crate) fn on_a_runtime_of_its_own(work: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            runtime.block_on(work);
        }
    })
    .join();
}

/// A Redis key prefix no other test uses.
pub fn redis_prefix() -> String {
    format!("test:{}:", Uuid::new_v4().simple())
}

/// A RabbitMQ vhost that exists for one test and is deleted with this guard.
#[derive(Debug)]
pub struct TestVhost {
    pub name: String,
    /// `AMQP_URL` for the vhost.
    pub url: String,
}

impl TestVhost {
    pub fn create() -> Self {
        let name = format!("test-{}", Uuid::new_v4().simple());
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        let url = format!("{}/{name}", amqp_server());
        Self { name, url }
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

fn rabbitmqctl(args: &[&str]) {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Records in `pool`'s database a migration newer than any this build knows, as the next
/// release applies one while instances of this release still run (a rolling update).
pub async fn record_a_newer_migration(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         SELECT max(version) + 1, 'from the next release', true, '\\x00'::bytea, 0 \
         FROM _sqlx_migrations",
    )
    .execute(pool)
    .await
    .expect("record a newer migration");
}
