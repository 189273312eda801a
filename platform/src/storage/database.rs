//! The database a request path reaches, whichever backend it is: chosen once at start, then
//! asked through the store functions of each capability, which hold both dialects side by
//! side. The loops (relay, consumer, retention) take the backend's store itself instead.

use sqlx::PgPool;

use super::Backend;
use super::mysql::MySqlStore;

/// A service's database: a PostgreSQL pool, or a MySQL one.
#[derive(Debug, Clone)]
pub enum Database {
    Postgres(PgPool),
    MySql(MySqlStore),
}

impl Database {
    pub fn backend(&self) -> Backend {
        match self {
            Self::Postgres(_) => Backend::Postgres,
            Self::MySql(_) => Backend::MySql,
        }
    }

    /// Whether the database answers a trivial statement.
    pub async fn answers(&self) -> bool {
        match self {
            Self::Postgres(pool) => sqlx::query_scalar!(r#"SELECT 1 AS "ping!""#)
                .fetch_one(pool)
                .await
                .is_ok(),
            Self::MySql(store) => platform_mysql::inbox::answers(&store.0).await,
        }
    }
}

impl From<PgPool> for Database {
    fn from(pool: PgPool) -> Self {
        Self::Postgres(pool)
    }
}
