//! [`AttemptTx`]: the transaction one attempt of a batch runs in, which is where the two
//! backends differ.

use platform::storage::Conn;
use sqlx::{Acquire, MySql, PgConnection, Transaction};

/// What [`super::read`] and [`super::record`] of one attempt run in.
#[derive(Debug)]
pub enum AttemptTx<'c> {
    /// PostgreSQL: no transaction. The read is a snapshot and the write one statement, its
    /// own transaction, that writes only if every product still has the version read.
    Postgres(&'c mut PgConnection),
    /// MySQL: one transaction from the read to the write's last statement. The write is several
    /// statements there, a round trip each; a version check at its start would fail again and
    /// again on a product another writer moves every few milliseconds (an expiry sweep, a
    /// second instance). So the read locks the batch's products instead, and the stock judged
    /// cannot move before it is written.
    MySql(Transaction<'c, MySql>),
}

impl<'c> AttemptTx<'c> {
    /// Opens the attempt on `conn`: a transaction on MySQL, nothing on PostgreSQL.
    pub async fn begin(conn: Conn<'c>) -> sqlx::Result<Self> {
        Ok(match conn {
            Conn::Postgres(conn) => Self::Postgres(conn),
            Conn::MySql(conn) => Self::MySql(conn.begin().await?),
        })
    }

    /// The connection its statements run on.
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Postgres(conn) => Conn::Postgres(conn),
            Self::MySql(tx) => Conn::MySql(tx),
        }
    }

    /// Ends the attempt, committing what it wrote (on PostgreSQL [`super::record`] committed it
    /// already).
    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            Self::Postgres(_) => Ok(()),
            Self::MySql(tx) => tx.commit().await,
        }
    }

    /// Ends a failed attempt, undoing what it wrote and releasing its locks now. (Dropped,
    /// a transaction is rolled back only when its connection is next used.) A rollback that
    /// fails leaves a broken connection, which fails its next statement and is replaced: the
    /// attempt's own error is what the caller reports.
    pub async fn rollback(self) {
        if let Self::MySql(tx) = self
            && let Err(error) = tx.rollback().await
        {
            tracing::debug!(%error, "rolling back a failed attempt");
        }
    }
}
