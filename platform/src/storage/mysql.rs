//! MySQL / MariaDB bootstrap: create the service's database when it is missing, connect with
//! the session settings the services rely on, migrate. The MySQL counterpart of
//! [`super::postgres`]; which one a service uses is decided by its `DATABASE_URL`'s scheme
//! ([`super::Backend`]). With several servers (`DATABASE_URLS`), the pool follows the one
//! that takes writes: see [`writer`].
//!
//! The statements here set up sessions and databases: none has parameters or rows to check,
//! and this crate's query macros are checked against PostgreSQL, so they are plain
//! `sqlx::query`. What the services' own code asks of the database lives in stores over the
//! checked statements of the `platform-mysql` crate, all on [`MySqlStore`]: [`relay`] for the
//! outbox relay, [`consumer`] for the consumer loop, [`maintenance`] for retention and the
//! backlog gauges.

pub mod consumer;
pub mod maintenance;
pub mod relay;
mod server;
pub mod writer;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions, MySqlSslMode};
use sqlx::{ConnectOptions, Connection, MySqlConnection, MySqlPool};

use super::postgres::PoolSettings;
use writer::Writer;

/// How long, in seconds, a session may sit idle inside a transaction before MariaDB ends it
/// (`idle_transaction_timeout`): the same safeguard, for the same reason, as PostgreSQL's
/// [`super::postgres::IDLE_IN_TRANSACTION_TIMEOUT`]. MySQL 8 has no such variable; see
/// [`Flavor::MySql`].
pub const IDLE_TRANSACTION_TIMEOUT_SECS: u32 = 30;

/// The longest a statement waits for a row lock (`innodb_lock_wait_timeout`, whole seconds)
/// before it fails with error 1205, the MySQL form of PostgreSQL's
/// [`super::postgres::LOCK_TIMEOUT`], and contention to both services in the same way.
pub const LOCK_WAIT_TIMEOUT_SECS: u32 = 1;

/// Every session reads committed data and locks only the rows it reads `FOR UPDATE`:
/// InnoDB's default, `REPEATABLE READ`, also takes gap locks on the index ranges a locking
/// read or an update scans, so the relay's `SKIP LOCKED` claim and the consumers' batches
/// would block each other's inserts into the same ranges. No write path of the services
/// needs a snapshot older than its statement: each one locks what it judges and guards what
/// it writes (the version and `stock >= quantity` conditions).
pub const ISOLATION: &str = "READ COMMITTED";

/// A MySQL pool as the stores platform's loops run on (the relay, the consumer loop,
/// retention); PostgreSQL's are the `PgPool` itself.
#[derive(Debug, Clone)]
pub struct MySqlStore(pub MySqlPool);

/// Which server answered: the two differ in variable names and collations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    /// MySQL 8.0.16 or later. It has no idle-transaction timeout: a frozen holder keeps its
    /// row locks until `wait_timeout` ends its session (other sessions' lock waits are still
    /// bounded by [`LOCK_WAIT_TIMEOUT_SECS`]).
    MySql,
}

impl Flavor {
    /// From `SELECT VERSION()`: MariaDB says so in its version string.
    pub fn of_version(version: &str) -> Self {
        if version.contains("MariaDB") {
            Self::MariaDb
        } else {
            Self::MySql
        }
    }

    /// The collation text is compared with: byte by byte and without padding, as PostgreSQL
    /// compares it. The servers' defaults are case-insensitive and pad with spaces, so
    /// `"key"`, `"KEY"` and `"key "` would be one idempotency key, deduction id or hold id.
    pub fn collation(self) -> &'static str {
        match self {
            Self::MariaDb => "utf8mb4_nopad_bin",
            Self::MySql => "utf8mb4_0900_bin",
        }
    }

    /// What each pooled session sets once, after it connects.
    fn session_settings(self) -> String {
        let common = format!(
            "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_SECS}, \
             SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,\
             ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,PIPES_AS_CONCAT', \
             SESSION time_zone = '+00:00'"
        );
        match self {
            Self::MariaDb => {
                format!(
                    "{common}, SESSION idle_transaction_timeout = {IDLE_TRANSACTION_TIMEOUT_SECS}"
                )
            }
            Self::MySql => common,
        }
    }
}

/// Connects to the database `url` names, creating it first if needed, and applies
/// `migrator`. Several instances may start at once: `CREATE DATABASE IF NOT EXISTS` does not
/// race, and [`migrate`] lets one instance at a time apply migrations.
pub async fn connect_and_migrate(
    url: &str,
    settings: &PoolSettings,
    migrator: &Migrator,
) -> anyhow::Result<MySqlPool> {
    let flavor = create_database_if_missing(url).await?;
    let options = connect_options(url)?;
    let pool = pool_options(settings)
        .after_connect(move |conn, _| Box::pin(async move { prepare_session(conn, flavor).await }))
        .connect_with(options)
        .await
        .context("connecting to MySQL")?;
    migrate(&pool, migrator).await?;
    Ok(pool)
}

/// [`connect_and_migrate`] on the server of `urls` that takes writes (`DATABASE_URLS`: a
/// primary and its replicas, in any order): the first whose `@@global.read_only` is off.
/// The pool then follows that server while it runs: when it is made read-only or goes away,
/// new connections go to the first other server that takes writes, and a server that still
/// takes writes is never left for one earlier in the list; see [`writer`]. The database is
/// created and migrated on the server chosen at start; the others get it by replication.
/// A single URL is connected to as [`connect_and_migrate`] does, with nothing to follow.
pub async fn connect_and_migrate_any(
    urls: &[String],
    settings: &PoolSettings,
    migrator: &Migrator,
) -> anyhow::Result<MySqlPool> {
    if let [url] = urls {
        return connect_and_migrate(url, settings, migrator).await;
    }
    let (writer, found) = Writer::find(urls).await?;
    let found = found?;
    let writer = Arc::new(writer);
    let flavor = create_database_if_missing(&urls[found.index]).await?;
    let pool = writer
        .hooks(pool_options(settings), flavor)
        .connect_with(writer.server(found.index).clone())
        .await
        .context("connecting to MySQL")?;
    migrate(&pool, migrator).await?;
    tokio::spawn(writer.watch(pool.clone(), found));
    Ok(pool)
}

/// The pool's size and timeouts; the caller adds how a new session is set up.
fn pool_options(settings: &PoolSettings) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // As on PostgreSQL: no ping before every checkout (a round trip per transaction);
        // a connection that died fails its first statement and leaves the pool.
        .test_before_acquire(false)
}

/// Applies `migrator` while holding a lock of our own on the database's migrations.
///
/// sqlx serialises migrations with `GET_LOCK(<id>, -1)`, and ignores what it returns: MySQL
/// reads -1 as "wait for ever", MariaDB refuses it (a warning, NULL, no lock), so on MariaDB
/// instances starting at once would apply the same migration together and all but one fail
/// on the duplicate version. The lock taken here, on the same session, waits as long as it
/// takes (another instance's migrations run meanwhile) and works on both.
async fn migrate(pool: &MySqlPool, migrator: &Migrator) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await.context("connecting to MySQL")?;
    let locked: Option<i32> =
        sqlx::query_scalar("SELECT GET_LOCK(CONCAT('migrations:', DATABASE()), 31536000)")
            .fetch_one(&mut *conn)
            .await
            .context("waiting for the migration lock")?;
    anyhow::ensure!(locked == Some(1), "the migration lock was not granted");
    let migrated = migrator.run_direct(None, &mut *conn, false).await;
    sqlx::query("SELECT RELEASE_LOCK(CONCAT('migrations:', DATABASE()))")
        .execute(&mut *conn)
        .await?;
    migrated.context("applying migrations")
}

/// Sets `conn` up as every pooled session is.
pub async fn prepare_session(conn: &mut MySqlConnection, flavor: Flavor) -> sqlx::Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL {ISOLATION}"
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(flavor.session_settings()))
        .execute(&mut *conn)
        .await
        .map(drop)
}

/// `url`'s options (`mysql://` or `mariadb://`); TLS only when the URL asks for it
/// (`ssl-mode=REQUIRED`, `VERIFY_CA` with `ssl-ca=<file>`, `VERIFY_IDENTITY`).
///
/// sqlx's default, `PREFERRED`, encrypts without verifying the server: no protection from
/// whoever can intercept the connection, at the cost of TLS. As with PostgreSQL, a URL
/// without `ssl-mode` means the plain connection of a trusted local network.
pub fn connect_options(url: &str) -> anyhow::Result<MySqlConnectOptions> {
    let url = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => {
            format!("mysql://{rest}")
        }
        _ => url.to_owned(),
    };
    let options: MySqlConnectOptions = url.parse().context("not a MySQL URL")?;
    let asked = url.contains("ssl-mode=") || url.contains("sslmode=");
    let options = if asked {
        options
    } else {
        options.ssl_mode(MySqlSslMode::Disabled)
    };
    Ok(options
        // The driver's own `SET` after connecting: only the time zone, which
        // [`prepare_session`] sets again with the rest.
        .pipes_as_concat(false)
        .no_engine_substitution(false)
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1)))
}

/// Creates the database `url` names unless it exists, with the collation of
/// [`Flavor::collation`]; returns which server answered.
async fn create_database_if_missing(url: &str) -> anyhow::Result<Flavor> {
    let options = connect_options(url)?;
    // Connect to no database in particular: the service's may not exist yet.
    let mut admin = MySqlConnection::connect_with(&connect_options(&without_database(url))?)
        .await
        .context("connecting to MySQL to check that the service's database exists")?;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut admin)
        .await?;
    let flavor = Flavor::of_version(&version);
    if let Some(name) = options.get_database() {
        let statement = format!(
            "CREATE DATABASE IF NOT EXISTS `{}` CHARACTER SET utf8mb4 COLLATE {}",
            name.replace('`', "``"),
            flavor.collation()
        );
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .context("creating the service's database")?;
    }
    admin.close().await.ok();
    Ok(flavor)
}

/// `url` with its path (the database) taken out and its query (TLS settings) kept. The
/// authority cannot hold a `/` (a password's is percent-encoded), so the path starts at the
/// first `/` after `://`.
fn without_database(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest[authority_end..]
        .find('?')
        .map_or("", |at| &rest[authority_end + at..]);
    format!("{scheme}://{}{query}", &rest[..authority_end])
}

#[cfg(test)]
mod tests {
    use super::{Flavor, without_database};

    #[test]
    fn the_database_is_taken_out_of_a_url_and_its_tls_settings_kept() {
        for (url, bare) in [
            (
                "mysql://root@127.0.0.1:3306/orders",
                "mysql://root@127.0.0.1:3306",
            ),
            (
                "mysql://u:p%2Fq@db:3306/orders?ssl-mode=VERIFY_CA&ssl-ca=/ca.pem",
                "mysql://u:p%2Fq@db:3306?ssl-mode=VERIFY_CA&ssl-ca=/ca.pem",
            ),
            (
                "mysql://db?ssl-mode=REQUIRED",
                "mysql://db?ssl-mode=REQUIRED",
            ),
            ("mysql://db", "mysql://db"),
        ] {
            assert_eq!(without_database(url), bare, "{url}");
        }
    }

    #[test]
    fn mariadb_is_told_from_mysql_by_its_version() {
        assert_eq!(
            Flavor::of_version("10.11.19-MariaDB-0+deb12u1"),
            Flavor::MariaDb
        );
        assert_eq!(Flavor::of_version("8.0.36"), Flavor::MySql);
    }
}
