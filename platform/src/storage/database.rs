//! The database a request path reaches, whichever backend it is: chosen once at start, then
//! asked through the store functions of each capability, which hold both dialects side by
//! side (one `match` on [`Conn`] at their top). The loops (relay, consumer, retention) take
//! the backend's store itself instead.

use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlConnection, PgConnection, PgPool, Postgres, Transaction};

use super::Backend;
use super::mysql::MySqlStore;
use super::postgres::planned_once::Kept;

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

    /// A transaction, for a path that reads and writes several statements together.
    pub async fn begin(&self) -> sqlx::Result<Tx> {
        Ok(match self {
            Self::Postgres(pool) => Tx::Postgres(pool.begin().await?),
            Self::MySql(store) => Tx::MySql(store.0.begin().await?),
        })
    }

    /// A pooled connection, for reads (each statement commits on its own).
    pub async fn acquire(&self) -> sqlx::Result<Pooled> {
        Ok(match self {
            Self::Postgres(pool) => Pooled::Postgres(pool.acquire().await?),
            Self::MySql(store) => Pooled::MySql(store.0.acquire().await?),
        })
    }

    /// The PostgreSQL pool, for what exists on PostgreSQL only (the vacuum loop).
    pub fn postgres(&self) -> Option<&PgPool> {
        match self {
            Self::Postgres(pool) => Some(pool),
            Self::MySql(_) => None,
        }
    }
}

impl From<PgPool> for Database {
    fn from(pool: PgPool) -> Self {
        Self::Postgres(pool)
    }
}

/// A connection the store functions run their statements on: inside a [`Tx`], on a
/// [`Pooled`] connection, or on a writer's [`Session`].
#[derive(Debug)]
pub enum Conn<'a> {
    Postgres(&'a mut PgConnection),
    MySql(&'a mut MySqlConnection),
}

impl Conn<'_> {
    /// The same connection, for one more call (a `Conn` is a mutable borrow, moved by each).
    pub fn reborrow(&mut self) -> Conn<'_> {
        match self {
            Self::Postgres(conn) => Conn::Postgres(conn),
            Self::MySql(conn) => Conn::MySql(conn),
        }
    }
}

impl<'a> From<&'a mut PgConnection> for Conn<'a> {
    fn from(conn: &'a mut PgConnection) -> Self {
        Self::Postgres(conn)
    }
}

/// A transaction on either backend; rolled back when dropped uncommitted.
#[derive(Debug)]
pub enum Tx {
    Postgres(Transaction<'static, Postgres>),
    MySql(Transaction<'static, MySql>),
}

impl Tx {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Postgres(tx) => Conn::Postgres(tx),
            Self::MySql(tx) => Conn::MySql(tx),
        }
    }

    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            Self::Postgres(tx) => tx.commit().await,
            Self::MySql(tx) => tx.commit().await,
        }
    }

    /// Undoes the transaction now (dropped, it is undone when its connection is next used).
    pub async fn rollback(self) -> sqlx::Result<()> {
        match self {
            Self::Postgres(tx) => tx.rollback().await,
            Self::MySql(tx) => tx.rollback().await,
        }
    }
}

/// A connection taken from the pool, back to it when dropped.
#[derive(Debug)]
pub enum Pooled {
    Postgres(PoolConnection<Postgres>),
    MySql(PoolConnection<MySql>),
}

impl Pooled {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Postgres(conn) => Conn::Postgres(conn),
            Self::MySql(conn) => Conn::MySql(conn),
        }
    }
}

/// The session a batch writer runs on. On PostgreSQL it is kept from one batch to the next
/// and plans its statements once ([`Kept`], decision 0063); MySQL plans nothing per session
/// worth keeping, so a batch takes a pooled connection and gives it back at its end.
#[derive(Debug, Default)]
pub struct Session {
    postgres: Kept,
    mysql: Option<PoolConnection<MySql>>,
}

impl Session {
    /// A PostgreSQL session kept by a writer before (from a [`super::postgres::planned_once::Shelf`]).
    pub fn kept(postgres: Kept) -> Self {
        Self {
            postgres,
            mysql: None,
        }
    }

    /// What goes back on the shelf: the PostgreSQL session, if one is open.
    pub fn into_kept(self) -> Kept {
        self.postgres
    }

    /// The session, opened if it is not.
    pub async fn get(&mut self, db: &Database) -> sqlx::Result<Conn<'_>> {
        Ok(match db {
            Database::Postgres(pool) => Conn::Postgres(self.postgres.get(pool).await?),
            Database::MySql(store) => {
                let conn = match &mut self.mysql {
                    Some(conn) => conn,
                    slot => slot.insert(store.0.acquire().await?),
                };
                Conn::MySql(conn)
            }
        })
    }

    /// Closes the session: its statement failed, or it may be mid-statement.
    pub fn discard(&mut self) {
        self.postgres.discard();
        self.mysql = None;
    }

    /// After a batch: what is not worth keeping goes back to the pool.
    pub fn end_batch(&mut self, db: &Database) {
        match db {
            Database::Postgres(pool) => self.postgres.end_batch(pool),
            Database::MySql(_) => self.mysql = None,
        }
    }
}
