//! inventory-service's statements on MySQL and MariaDB: a batch of deductions and holds' tries
//! ([`deductions`]), the ends and expiry of holds ([`holds`]), a batch of order events
//! ([`reservations`]), products ([`products`]) and the restock ledger ([`restocks`]). Each one
//! is a `sqlx::query!` (or `query_as!` / `query_scalar!`) checked at build time against the
//! inventory schema on MariaDB (`migrations/inventory-service/mysql/`), and each function is
//! the MySQL form of the PostgreSQL statement of the same name in inventory-service, with the
//! same rows written and the same guards.
//!
//! A crate of its own because sqlx checks every statement of a crate against one database. It
//! holds the statements and the plain types they read and write, nothing else: the service
//! wraps them into its stores and maps the plain types (ids as `i64`, states and reasons as
//! text) to its own, so this crate never depends on the service.
//!
//! Where PostgreSQL writes a whole batch in one statement (data-modifying CTEs), a function
//! here runs several statements on the connection it is given, which must be inside a
//! transaction the caller opened: the statements are only all or nothing together there. On
//! any error the caller rolls that transaction back (as PostgreSQL undoes a statement that
//! raised); a guard that fell short returns [`serialization_failure`] (SQLSTATE 40001), the
//! code PostgreSQL's `serialization_failure(…)` raises, so the service's rules, which run the
//! batch again on 40001, read one answer. The statements take their locks in PostgreSQL's
//! order: products in ascending id, holds and reservations in ascending id.
//!
//! What MySQL lacks, or does differently, and how the statements deal with it:
//! - no array parameters: a list is one JSON parameter read as rows with `JSON_TABLE`, joined
//!   `STRAIGHT_JOIN … FORCE INDEX (PRIMARY)` so that the table is read by key, in the array's
//!   order (which is also the order its rows are locked in: the arrays are sorted here
//!   first). Both hints are needed: on a small table, or with a condition on `state` beside
//!   the key, MariaDB plans a multi-table `UPDATE` as a full scan, which locks every row it
//!   reads, waits for rows the statement never writes, and in no useful order;
//! - `JSON_TABLE` cuts a string longer than its column with only a warning, even under a strict
//!   `sql_mode`: its text columns are wider than any key they are compared with (a cut value
//!   could otherwise match a shorter key) and `LONGTEXT` where they are written, so the table's
//!   own column refuses a value too long rather than storing it cut;
//! - no `UPDATE … RETURNING` (and no `DELETE … RETURNING` on MySQL 8): rows are locked and
//!   read first (`FOR UPDATE`), then written, and what a write left is known from what the
//!   locked read found;
//! - rows affected count the rows *matched* (sqlx connects with `CLIENT_FOUND_ROWS`): a count
//!   is read only from an update that changes every row it matches (the version bump, a state
//!   change), never from `INSERT … ON DUPLICATE KEY UPDATE`, where a skipped row counts 1 as an
//!   inserted one does;
//! - `ON CONFLICT DO NOTHING` whose skip PostgreSQL counts as a failure is a plain `INSERT`
//!   here: a duplicate key fails it (error 1062), which the function reports as the same
//!   serialization failure. Where a skip is the answer (`products::insert`,
//!   `restocks::insert`, the tombstones of `holds::cancel_all`), the duplicate error of the
//!   one key PostgreSQL's `ON CONFLICT` names is that answer; any other error stays an error;
//! - `now()`, the transaction's start, is one clock reading per function
//!   (`UTC_TIMESTAMP(6)`, the sessions run in `+00:00`), passed to each statement that stamps
//!   or compares a time;
//! - on MariaDB, `JSON` is `LONGTEXT`: JSON columns are read as text and parsed
//!   (`` AS `items: serde_json::Value` ``);
//! - a CHECK constraint refused is error 4025 on MariaDB and 3819 on MySQL (PostgreSQL: 23514),
//!   and sqlx does not give its name: [`violated_check`] reads it from the message.
//!
//! Overrides are written as MySQL aliases in backticks, `` AS `name: Type` ``, `` `name!` ``
//! (not null), `` `name?` `` (nullable); `DATETIME(6)` columns are read as `DateTime<Utc>`,
//! `BINARY(16)` ones as [`uuid::Uuid`].

pub mod deductions;
pub mod holds;
pub mod products;
pub mod reservations;
pub mod restocks;
mod stock;

pub use platform_mysql::serialization_failure;
pub use stock::{Change, StockRow};

/// One product and how many units of it: a hold's units, as `held_units` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub product_id: i64,
    pub quantity: i64,
}

/// The name of the CHECK constraint `error` reports refused, when it is such an error
/// (PostgreSQL's 23514, whose constraint name sqlx gives; MariaDB's error 4025 and MySQL's
/// 3819, whose names are only in the message): `products_stock_non_negative`,
/// `restocks_quantity_range`, …, the names of the PostgreSQL schema.
pub fn violated_check(error: &sqlx::Error) -> Option<String> {
    let database = error.as_database_error()?;
    if database.kind() != sqlx::error::ErrorKind::CheckViolation {
        return None;
    }
    // MariaDB: "CONSTRAINT `products_stock_non_negative` failed for `db`.`products`";
    // MySQL: "Check constraint 'products_stock_non_negative' is violated."
    let message = database.message();
    let start = message.find(['`', '\''])?;
    let quote = message[start..].chars().next()?;
    let rest = &message[start + 1..];
    let end = rest.find(quote)?;
    Some(rest[..end].to_owned())
}

/// Whether `error` is a duplicate of the unique key `key` (error 1062; `PRIMARY` for a
/// primary key). MariaDB names the key `'key'`, MySQL 8 `'table.key'`.
pub(crate) fn is_duplicate(error: &sqlx::Error, key: &str) -> bool {
    let Some(database) = error.as_database_error() else {
        return false;
    };
    let Some(mysql) = database.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() else {
        return false;
    };
    let message = mysql.message();
    mysql.number() == 1062
        && (message.ends_with(&format!("key '{key}'")) || message.ends_with(&format!(".{key}'")))
}

/// `result`, with a duplicate of the primary key reported as a serialization failure: an id
/// another writer recorded since the batch read (or, for a batch judged without a read, before
/// it), which PostgreSQL's `ON CONFLICT DO NOTHING` skipped and its count then refused.
pub(crate) fn duplicate_is_contention<T>(
    result: sqlx::Result<T>,
    why: &'static str,
) -> sqlx::Result<T> {
    result.map_err(|error| {
        if is_duplicate(&error, "PRIMARY") {
            serialization_failure(why)
        } else {
            error
        }
    })
}

/// `ids` once each, in ascending order: the order rows keyed by them are locked in.
pub(crate) fn ascending<T: Ord + Clone>(ids: &[T]) -> Vec<T> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// `items` as one JSON array parameter.
pub(crate) fn json_array(items: impl IntoIterator<Item = serde_json::Value>) -> String {
    serde_json::Value::Array(items.into_iter().collect()).to_string()
}

/// A text list as the JSON array parameter `JSON_TABLE` reads.
pub(crate) fn json_texts<S: AsRef<str>>(texts: &[S]) -> String {
    json_array(texts.iter().map(|t| serde_json::Value::from(t.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_once_each() {
        assert_eq!(ascending(&[3, 1, 3, 2]), vec![1, 2, 3]);
        assert_eq!(ascending(&["b", "a", "b"]), vec!["a", "b"]);
        assert_eq!(json_texts(&["a\"b", "é"]), r#"["a\"b","é"]"#);
        assert_eq!(json_texts::<&str>(&[]), "[]");
    }
}
