//! The rules request values are held to: [`Invalid`], the refusal every validated type
//! returns, and [`product_id`], shared by products and deductions. No axum, no sqlx.

/// A request value broke a rule; the message says which, in words a client can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// A positive product id.
pub fn product_id(raw: i64) -> Result<shared::ids::ProductId, Invalid> {
    if raw >= 1 {
        Ok(shared::ids::ProductId(raw))
    } else {
        Err(Invalid::new(format!(
            "product_id must be a positive integer, got {raw}"
        )))
    }
}
