//! The first response to an idempotency token: what every replay of that token answers,
//! byte for byte. Kept in Redis (the cache) and committed with the order (the truth).

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use shared::ids::UserId;
use uuid::Uuid;

/// The first response to a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub fingerprint: String,
    pub order_id: Uuid,
    pub status: ResponseStatus,
    pub body: String,
    /// Who took the token (identity on); only they may have the response again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taker: Option<UserId>,
}

/// The HTTP status of a stored response, read strictly wherever it is stored: a number that
/// is not a status code fails the read instead of becoming some default status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct ResponseStatus(StatusCode);

impl ResponseStatus {
    /// An order placed: `202 Accepted`, its stock not yet judged.
    pub const ACCEPTED: Self = Self(StatusCode::ACCEPTED);

    pub fn code(self) -> StatusCode {
        self.0
    }
}

/// A stored number that is not an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not an HTTP status")]
pub struct NotAStatus(i32);

impl TryFrom<u16> for ResponseStatus {
    type Error = NotAStatus;

    fn try_from(raw: u16) -> Result<Self, Self::Error> {
        StatusCode::from_u16(raw)
            .map(Self)
            .map_err(|_| NotAStatus(raw.into()))
    }
}

impl TryFrom<i16> for ResponseStatus {
    type Error = NotAStatus;

    fn try_from(raw: i16) -> Result<Self, Self::Error> {
        u16::try_from(raw)
            .map_err(|_| NotAStatus(raw.into()))
            .and_then(Self::try_from)
    }
}

impl From<ResponseStatus> for u16 {
    fn from(status: ResponseStatus) -> Self {
        status.0.as_u16()
    }
}

impl From<ResponseStatus> for i16 {
    fn from(status: ResponseStatus) -> Self {
        // Every status code is below 1000.
        status.0.as_u16() as i16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_status_is_read_strictly() {
        assert_eq!(
            ResponseStatus::try_from(202_i16),
            Ok(ResponseStatus::ACCEPTED)
        );
        assert_eq!(i16::from(ResponseStatus::ACCEPTED), 202);
        assert!(ResponseStatus::try_from(0_i16).is_err());
        assert!(ResponseStatus::try_from(-202_i16).is_err());
        assert!(ResponseStatus::try_from(1000_u16).is_err());
        assert!(serde_json::from_str::<ResponseStatus>("99").is_err());
        assert_eq!(
            serde_json::to_string(&ResponseStatus::ACCEPTED).expect("a number"),
            "202"
        );
    }
}
