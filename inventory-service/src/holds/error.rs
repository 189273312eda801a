//! [`HoldError`]: why a confirm, cancel or read of a hold got no hold back. A leaf: the
//! handlers that word it and the batches that fail with it both name it.

use chrono::{DateTime, Utc};

/// Why a confirm, cancel or read of a hold got no hold back.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// No try of this id held anything, and no cancel of it came: 404 `not-found`.
    #[error("hold {0:?} was never tried")]
    NotFound(String),
    /// 409 `hold-expired`: the deadline passed before the confirm.
    #[error("hold {0:?} expired at {1}; its units are given back")]
    Expired(String, DateTime<Utc>),
    /// 409 `hold-cancelled`.
    #[error("hold {0:?} was cancelled")]
    Cancelled(String),
    /// 409 `hold-confirmed`: a cancel of a confirmed hold.
    #[error("hold {0:?} was confirmed; its units are sold")]
    Confirmed(String),
    /// The database had no connection free for the whole acquire timeout: 503 `busy`.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}
