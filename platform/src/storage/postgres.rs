//! Database bootstrap: create the service's database when it is missing, connect, migrate.

pub mod planned_once;
pub mod primary;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use primary::Primary;

/// How long a session may sit idle inside a transaction before PostgreSQL ends it. A frozen
/// instance (SIGSTOP, a hung host) would otherwise keep its row locks, and every other
/// instance would wait on them for as long as it stays frozen; no transaction of the services
/// waits on anything but the database for anywhere near this long.
pub const IDLE_IN_TRANSACTION_TIMEOUT: &str = "30s";

/// The longest any statement of the services waits for a lock (a row another transaction
/// holds) before it fails with SQLSTATE 55P03, which both services treat as contention: a
/// consumer keeps the message for a later batch, `POST /deductions` tries again within its
/// request time, then answers 503 `busy`. No transaction of the services holds a row for
/// anywhere near this long unless its holder is stuck (paused with its transaction open, for
/// up to [`IDLE_IN_TRANSACTION_TIMEOUT`]); waiting on it would stall the waiter with it.
/// Migrations wait without a limit.
pub const LOCK_TIMEOUT: &str = "1s";

/// Every statement planned for the values it runs with. sqlx prepares a statement once per
/// connection, and PostgreSQL moves a prepared statement to a generic plan after five runs;
/// made while a table is still small (a fresh database, or one whose statistics were never
/// gathered), that plan scans the whole table, and goes on scanning it as the table grows:
/// the lookups by `= ANY($1)` of stored deduction ids and processed message ids would cost
/// more with every row stored. Planning each run costs tens of microseconds a statement.
pub const PLAN_CACHE_MODE: &str = "force_custom_plan";

/// Pool sizing and timeouts.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 20,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Connects to the primary among `urls` (one URL, or a primary and its standbys in any
/// order), creating the database first if needed, and applies `migrator`. The pool then
/// follows the primary: see [`primary`].
///
/// Several instances may start at once: a concurrent `CREATE DATABASE` is tolerated, and
/// sqlx serialises migrations with an advisory lock.
pub async fn connect_and_migrate(
    urls: &[String],
    settings: &PoolSettings,
    migrator: &Migrator,
) -> anyhow::Result<PgPool> {
    let hosts = urls
        .iter()
        .map(|url| connect_options(url))
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!hosts.is_empty(), "no PostgreSQL URL to connect to");
    // The service's database may not exist yet: ask on the maintenance database.
    let maintenance = hosts
        .iter()
        .map(|h| h.clone().database("postgres"))
        .collect();
    let (primary, found) = Primary::find(hosts, maintenance).await;
    let primary = Arc::new(primary);
    let found = found.context("connecting to PostgreSQL")?;
    create_database_if_missing(primary.chosen()).await?;
    let (admit, current) = (primary.clone(), primary.clone());
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // No ping before every checkout: it costs a round trip per transaction, and a
        // connection that died with its server fails its first statement and is dropped
        // from the pool anyway (requests fail once, then the pool reconnects).
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let admit = admit.clone();
            Box::pin(async move { admit.admit(conn).await })
        })
        .before_acquire(move |_, meta| {
            let current = current.is_current(&meta);
            Box::pin(async move { Ok(current) })
        })
        .connect_with(session_options(primary.chosen()))
        .await
        .context("connecting to PostgreSQL")?;
    migrate(&pool, migrator).await?;
    tokio::spawn(primary.watch(pool.clone(), Some(found), session_options));
    Ok(pool)
}

/// Applies `migrator` on a pooled connection, with no limit on lock waits: another
/// instance starting at once holds sqlx's migration lock for as long as its migrations run.
async fn migrate(pool: &PgPool, migrator: &Migrator) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await.context("connecting to PostgreSQL")?;
    sqlx::query("SET lock_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let migrated = migrator.run(&mut *conn).await;
    // Back to the session's own limit before the connection returns to the pool.
    sqlx::query("RESET lock_timeout")
        .execute(&mut *conn)
        .await?;
    migrated.context("applying migrations")
}

/// A host's options as the pool's sessions use them.
fn session_options(host: &PgConnectOptions) -> PgConnectOptions {
    host.clone()
        .options([
            (
                "idle_in_transaction_session_timeout",
                IDLE_IN_TRANSACTION_TIMEOUT,
            ),
            ("lock_timeout", LOCK_TIMEOUT),
            ("plan_cache_mode", PLAN_CACHE_MODE),
        ])
        .log_statements(tracing::log::LevelFilter::Trace)
}

/// `url`'s options; TLS only when the URL (or `PGSSLMODE`) asks for it.
///
/// libpq's default, `prefer`, encrypts without verifying the server, so it protects from no
/// one who can intercept the connection, and it is not free: against this machine's
/// TLS-enabled PostgreSQL it cut order intake to 0.6 of the plain-text rate. Production URLs
/// say `sslmode=verify-full` (or `require`) and get verified TLS; one without `sslmode`
/// means the plain connection of a trusted local network.
pub fn connect_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    let options: PgConnectOptions = url.parse().context("not a PostgreSQL URL")?;
    let asked = url.contains("sslmode=")
        || url.contains("ssl-mode=")
        || std::env::var_os("PGSSLMODE").is_some();
    Ok(if asked {
        options
    } else {
        options.ssl_mode(PgSslMode::Disable)
    })
}

async fn create_database_if_missing(options: &PgConnectOptions) -> anyhow::Result<()> {
    let Some(name) = options.get_database().map(str::to_owned) else {
        return Ok(());
    };
    let mut admin: PgConnection = options
        .clone()
        .database("postgres")
        .connect()
        .await
        .context(
            "connecting to the `postgres` database to check that the service's database exists",
        )?;
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
        name,
    )
    .fetch_one(&mut admin)
    .await?;
    if !exists {
        match crate::raw::create_database(&mut admin, &name).await {
            Ok(_) => tracing::info!(database = %name, "created database"),
            // Another instance won the race: duplicate_database, or the unique index behind it.
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("42P04") | Some("23505")) => {}
            Err(e) => return Err(e).context("creating the service's database"),
        }
    }
    admin.close().await.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{ConnectOptions, Connection};

    use super::connect_options;

    /// Whether a connection made from `url` runs over TLS, as the server sees it.
    async fn encrypted(url: &str) -> bool {
        let mut conn = connect_options(url)
            .expect("a URL")
            .connect()
            .await
            .expect("a connection");
        let ssl: bool =
            sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(&mut conn)
                .await
                .expect("pg_stat_ssl");
        conn.close().await.expect("close");
        ssl
    }

    #[tokio::test]
    async fn tls_is_used_only_when_the_url_asks_for_it() {
        let server =
            crate::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432");
        let base = format!("{server}/postgres");
        if std::env::var_os("PGSSLMODE").is_none() {
            assert!(!encrypted(&base).await, "no sslmode: plain text");
        }
        let mut conn = connect_options(&base)
            .expect("a URL")
            .connect()
            .await
            .expect("a connection");
        let server_has_tls: String = sqlx::query_scalar("SHOW ssl")
            .fetch_one(&mut conn)
            .await
            .expect("SHOW ssl");
        conn.close().await.expect("close");
        if server_has_tls == "on" {
            assert!(encrypted(&format!("{base}?sslmode=require")).await);
        }
    }
}
