//! Storage: PostgreSQL (the pool, finding the primary, vacuum while autovacuum is off),
//! MySQL / MariaDB (the pool and its sessions; see [`Backend`] for which one a service uses),
//! Redis (the connection, Sentinel, the health gate every call goes through) and the private
//! CAs both are verified with.

mod database;
pub mod mysql;
pub mod postgres;
pub mod redis;
pub mod tls;
pub mod vacuum;

pub use database::{Conn, Database, Pooled, Session, Tx};
pub use mysql::MySqlStore;

/// The database a service runs on, told by its `DATABASE_URL`'s scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` or `mariadb://`: MySQL 8.0.16+ or MariaDB 10.6+.
    MySql,
}

impl Backend {
    /// The backend `url` names. An unknown scheme is an error that names it (not the URL,
    /// which may carry a password).
    pub fn of_url(url: &str) -> anyhow::Result<Self> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => Ok(Self::Postgres),
            Some("mysql" | "mariadb") => Ok(Self::MySql),
            Some(other) => {
                anyhow::bail!("unknown scheme `{other}://`: expected `postgres://` or `mysql://`")
            }
            None => anyhow::bail!("not a URL: expected `postgres://…` or `mysql://…`"),
        }
    }

    /// How `/readyz` and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
        }
    }
}

/// A lock wait that ran out (a row another transaction held past the session's limit):
/// PostgreSQL's `lock_not_available` (SQLSTATE 55P03), MySQL's lock wait timeout (error
/// 1205, whose SQLSTATE is the catch-all HY000, so the number decides).
pub fn is_lock_timeout(error: &sqlx::Error) -> bool {
    let Some(database) = error.as_database_error() else {
        return false;
    };
    if let Some(mysql) = database.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return mysql.number() == 1205;
    }
    database.code().is_some_and(|code| code == "55P03")
}

/// A deadlock, a serialization failure or a lock timeout: the database undid this
/// transaction (or statement) because of another one, and running it again is the remedy.
/// MySQL reports a deadlock (error 1213) as SQLSTATE 40001.
pub fn is_contention(error: &sqlx::Error) -> bool {
    is_lock_timeout(error)
        || error
            .as_database_error()
            .and_then(|e| e.code())
            .is_some_and(|code| matches!(code.as_ref(), "40P01" | "40001"))
}
