//! [`clock`]: the database's time, which stamps a batch's holds.

use chrono::{DateTime, Utc};
use platform::storage::Conn;

use super::AttemptTx;

/// The database's clock, read in `tx`. A hold's deadline is judged by the database's clock
/// (every statement that confirms, cancels or expires one compares with `now()`), so it is
/// stamped by the same clock: a service host whose clock is off by a minute would otherwise
/// give every hold it takes a minute more, or less, than its TTL.
pub async fn clock(tx: &mut AttemptTx<'_>) -> sqlx::Result<DateTime<Utc>> {
    match tx.conn() {
        Conn::Postgres(conn) => {
            sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
                .fetch_one(conn)
                .await
        }
        Conn::MySql(conn) => inventory_mysql::holds::clock(conn).await,
    }
}
