//! The statements of this crate that cannot be checked at build time. Every other statement
//! is a `sqlx::query!` (offline data in `.sqlx/`, see scripts/sqlx-prepare.sh); each one here
//! says why it is not.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

/// `CREATE DATABASE "<name>"`, the name quoted the way PostgreSQL quotes identifiers.
///
/// Not checkable: the database's name comes from the configured URL, and an identifier
/// cannot be bound as a parameter, so the statement's text is only known at run time.
pub(crate) async fn create_database(conn: &mut PgConnection, name: &str) -> sqlx::Result<()> {
    let statement = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
    sqlx::query(sqlx::AssertSqlSafe(statement))
        .execute(conn)
        .await
        .map(drop)
}

/// `VACUUM <tables>`, sent with the simple protocol (VACUUM cannot run in a transaction).
///
/// Not checkable: the table names are a list (this crate's and the services' own constants)
/// that cannot be bound as parameters, and some of them exist in one service's database only.
/// No ANALYZE: on these tables it costs a second (the JSON columns), where the vacuum costs
/// tens of milliseconds; VACUUM still keeps the planner's row and page counts current.
pub(crate) async fn vacuum(db: &PgPool, tables: &[&str]) -> sqlx::Result<()> {
    let statement = format!("VACUUM {}", tables.join(", "));
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(db)
        .await
        .map(drop)
}

/// A transaction that commits without waiting for its WAL flush, begun with
/// `BEGIN; SET LOCAL synchronous_commit = off` sent as one simple query (one round trip).
///
/// Not checkable: two statements in one simple query, which the query macros (prepared
/// statements, one statement each) cannot describe; it returns no rows and takes no
/// parameters, so there is nothing to check but its syntax.
pub(crate) async fn begin_async_commit(
    db: &PgPool,
) -> sqlx::Result<Transaction<'static, Postgres>> {
    db.begin_with("BEGIN; SET LOCAL synchronous_commit = off")
        .await
}
