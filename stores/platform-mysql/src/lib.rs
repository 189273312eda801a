//! platform's statements on MySQL and MariaDB: the outbox ([`outbox`]), what consumers keep
//! about messages ([`inbox`]) and the outbox's operator endpoints ([`admin`]). Each one is a
//! `sqlx::query!` (or `query_as!` / `query_scalar!`) checked at build time against the
//! orders schema on MariaDB (`migrations/order-service/mysql/`; the tables used here are the
//! same in inventory-service's schema).
//!
//! A crate of its own because sqlx checks every statement of a crate against one database,
//! and platform's own statements are checked against PostgreSQL. It holds the statements and
//! the plain types they read and write, nothing else: platform wraps them into the stores its
//! loops run on (`platform::storage::mysql`), so this crate never depends on platform.
//!
//! What MySQL lacks and how the statements do without it:
//! - no array parameters: a list is one JSON parameter, read as rows with `JSON_TABLE`;
//! - no `UPDATE … RETURNING` (and MariaDB's `INSERT … RETURNING` does not report what
//!   `ON DUPLICATE KEY UPDATE` made of a row): the write, then a read, in one transaction;
//! - rows affected count the rows *matched*, not the rows changed (sqlx's driver connects
//!   with `CLIENT_FOUND_ROWS`), so a count is only ever read as "rows the `WHERE` found";
//! - `TEXT` holds 65,535 bytes, and a strict `sql_mode` refuses a longer value: error texts
//!   are cut to [`MAX_ERROR_BYTES`] before they are written;
//! - on MariaDB, `JSON` is `LONGTEXT`: JSON columns are read as text and parsed (the
//!   `serde_json::Value` overrides below decode from text);
//! - the optimiser guesses `status = '…'` from index statistics (three distinct values: a
//!   third of the table), whatever the real share: the statements that must read one small
//!   range name their index (`FORCE INDEX`, `STRAIGHT_JOIN`), see each one.
//!
//! Overrides are written as MySQL aliases in backticks, `` AS `name: Type` ``, `` `name!` ``
//! (not null); `DATETIME(6)` columns are read as `DateTime<Utc>` (the sessions' time zone is
//! `+00:00`), `BINARY(16)` ones as [`uuid::Uuid`].

pub mod admin;
mod conflict;
pub mod inbox;
pub mod outbox;

pub use conflict::serialization_failure;

use std::time::Duration;

use uuid::Uuid;

/// The most bytes of an error text written to a `TEXT` column (65,535 bytes on MySQL and
/// MariaDB): under a strict `sql_mode` a longer value fails the whole statement, and the
/// statement that records a failure must not fail because the failure was verbose. 16 KiB is
/// far below the limit, whatever the characters, and more than any useful error message.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;

/// `error`, cut to at most [`MAX_ERROR_BYTES`] bytes at a character boundary (a cut inside a
/// character would be invalid UTF-8, which the column refuses as well).
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

/// `ids` as the JSON array of hyphenated strings the statements read with `JSON_TABLE`
/// (`UNHEX(REPLACE(id, '-', ''))` makes each one the 16 bytes of its `BINARY(16)` column).
pub fn json_ids(ids: &[Uuid]) -> String {
    serde_json::Value::from(ids.iter().map(Uuid::to_string).collect::<Vec<_>>()).to_string()
}

/// A duration as the whole microseconds `INTERVAL ? MICROSECOND` takes (saturating: a date
/// pushed out of `DATETIME`'s range becomes NULL, which no row's date compares to).
pub fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The ids of `pairs` once each, the first pair of each id kept, in their first order.
pub fn first_of_each<T: Copy>(pairs: &[(Uuid, T)]) -> Vec<(Uuid, T)> {
    let mut seen = std::collections::HashSet::with_capacity(pairs.len());
    pairs
        .iter()
        .filter(|(id, _)| seen.insert(*id))
        .copied()
        .collect()
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
        assert!(long.starts_with(cut));
        assert_eq!(fitting_error("short"), "short");
        let exact = "a".repeat(MAX_ERROR_BYTES);
        assert_eq!(fitting_error(&exact), exact);
    }

    #[test]
    fn ids_are_written_hyphenated_and_durations_in_microseconds() {
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(
            json_ids(&[id]),
            r#"["01234567-89ab-cdef-0123-456789abcdef"]"#
        );
        assert_eq!(json_ids(&[]), "[]");
        assert_eq!(micros(Duration::from_millis(1500)), 1_500_000);
        assert_eq!(micros(Duration::MAX), i64::MAX);
    }

    #[test]
    fn the_first_pair_of_each_id_is_kept_in_order() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert_eq!(
            first_of_each(&[(b, "1"), (a, "2"), (b, "3")]),
            vec![(b, "1"), (a, "2")]
        );
    }
}
