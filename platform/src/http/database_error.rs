//! A failed database call as both services answer it: an exhausted pool is overload, any
//! other error a 500 whose cause is logged and never sent to the client.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use shared::Problem;

use super::RETRY_AFTER_SECS;

/// A database error, sorted by what it tells the client.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// Every connection stayed busy for the whole acquire timeout, or a row stayed locked for
    /// the whole lock timeout: overload or a stuck writer, not a bug.
    /// 503 `busy` with `Retry-After`; the request changed nothing and can be sent again.
    #[error("the database is busy; retry shortly")]
    Busy,
    /// 500 `internal`.
    #[error(transparent)]
    Failed(sqlx::Error),
}

impl From<sqlx::Error> for DatabaseError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::PoolTimedOut => Self::Busy,
            // A lock another transaction held past the session's lock timeout: nothing
            // changed, and the same request a moment later will likely go through.
            other if crate::storage::is_lock_timeout(&other) => Self::Busy,
            other => Self::Failed(other),
        }
    }
}

impl DatabaseError {
    /// The problem the client is sent, without the cause.
    pub fn problem(&self) -> Problem {
        match self {
            Self::Busy => Problem::busy(self.to_string()),
            Self::Failed(_) => Problem::internal(),
        }
    }
}

impl IntoResponse for DatabaseError {
    /// Logs the error (a busy pool as a warning) and answers its problem.
    fn into_response(self) -> Response {
        let problem = self.problem();
        match &self {
            Self::Busy => tracing::warn!(
                "request refused as busy: the database pool is exhausted, or a row stayed locked"
            ),
            Self::Failed(error) => tracing::error!(?error, "request failed"),
        }
        let mut response = problem.into_response();
        if matches!(self, Self::Busy) {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn a_pool_timeout_is_a_busy_503_with_retry_after() {
        let response = DatabaseError::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response
                .headers()
                .get(header::RETRY_AFTER)
                .map(HeaderValue::as_bytes),
            Some(&b"1"[..])
        );
    }

    #[test]
    fn other_database_errors_stay_500_and_say_nothing() {
        let error = DatabaseError::from(sqlx::Error::Protocol("secret table t_x".into()));
        let problem = error.problem();
        assert_eq!((problem.status, problem.slug()), (500, "internal"));
        assert!(!problem.detail.contains("secret"));
        assert_eq!(
            error.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
