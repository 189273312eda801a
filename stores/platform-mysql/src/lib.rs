//! platform's statements on MySQL and MariaDB, each a `sqlx::query!` checked at build time
//! against the orders schema on MariaDB (`migrations/order-service/mysql/`).
//!
//! A crate of its own because sqlx checks the statements of a crate against one database,
//! and platform's are checked against PostgreSQL. It holds statements and the plain types
//! they read and write, nothing else: platform wraps them into the stores its loops run on
//! (`platform::storage::mysql`), so this crate never depends on platform.
//!
//! What MySQL lacks and how each statement does without it: no array parameters (a JSON
//! parameter read with `JSON_TABLE`), no `UPDATE … RETURNING` (the update, then a read, in
//! one transaction), rows affected that count rows *matched* (sqlx sets `CLIENT_FOUND_ROWS`).

pub mod admin;
pub mod inbox;
pub mod outbox;

use std::time::Duration;

use uuid::Uuid;

/// The most bytes of an error text kept in a `TEXT` column (65,535 bytes on MySQL): a
/// longer one is cut, at a character boundary, rather than failing the write that records it.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;

/// `error`, cut to at most [`MAX_ERROR_BYTES`] at a character boundary.
pub fn fitting_error(error: &str) -> &str {
    if error.len() <= MAX_ERROR_BYTES {
        return error;
    }
    let mut end = MAX_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// `ids` as the JSON array of strings the statements read with `JSON_TABLE`.
pub(crate) fn json_ids(ids: &[Uuid]) -> String {
    serde_json::Value::from(ids.iter().map(|id| id.to_string()).collect::<Vec<_>>()).to_string()
}

/// A duration as the whole microseconds `INTERVAL ? MICROSECOND` takes.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// A JSON column's text (MariaDB's `JSON` is `LONGTEXT`), parsed.
pub(crate) fn parse_json(text: &str) -> sqlx::Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = fitting_error(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES);
        assert!(cut.len() >= MAX_ERROR_BYTES - 1);
        assert_eq!(fitting_error("short"), "short");
    }
}
