//! A guarded write that found its guard broken, reported as PostgreSQL reports it.
//!
//! On PostgreSQL a batch's write is one statement that raises a serialization failure
//! (SQLSTATE 40001) when an order left its state or a message was recorded since the batch
//! read them; the services judge the batch again on that code
//! (`platform::storage::is_contention`). MySQL cannot raise from a plain statement (`SIGNAL`
//! runs only in stored programs), so its statements check the guard's counts themselves and
//! fail with this error, which carries the same code: the rules above read one answer.

use std::borrow::Cow;
use std::fmt;

/// A write whose guard fell short, with SQLSTATE 40001 (`serialization_failure`).
#[derive(Debug)]
struct SerializationFailure(&'static str);

impl fmt::Display for SerializationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for SerializationFailure {}

impl sqlx::error::DatabaseError for SerializationFailure {
    fn message(&self) -> &str {
        self.0
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed("40001"))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

/// The error a guarded MySQL write returns when what it relied on changed since it was
/// read: `why` says what (it is the error's message). The transaction it ran in must be
/// rolled back, as after PostgreSQL's 40001.
pub fn serialization_failure(why: &'static str) -> sqlx::Error {
    sqlx::Error::Database(Box::new(SerializationFailure(why)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_carries_postgresql_s_serialization_failure_code() {
        let error = serialization_failure("an order left PENDING");
        let database = error.as_database_error().expect("a database error");
        assert_eq!(database.code().as_deref(), Some("40001"));
        assert_eq!(database.message(), "an order left PENDING");
    }
}
