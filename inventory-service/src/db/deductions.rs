//! The `deductions` table: the first outcome of every deduction id, kept for replays.

use sqlx::PgConnection;

/// The first outcome of a deduction id.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredDeduction {
    pub fingerprint: String,
    pub response_status: i16,
    pub response_body: Vec<u8>,
}

/// A deduction's outcome about to be recorded.
#[derive(Debug, Clone)]
pub struct NewDeduction<'a> {
    pub deduction_id: &'a str,
    pub fingerprint: &'a str,
    pub items: serde_json::Value,
    /// `APPLIED` or `REJECTED`.
    pub status: &'static str,
    /// `insufficient_stock` or `unknown_product` when rejected.
    pub rejection_reason: Option<&'static str>,
    pub response_status: u16,
    pub response_body: &'a [u8],
}

pub async fn find(
    conn: &mut PgConnection,
    deduction_id: &str,
) -> sqlx::Result<Option<StoredDeduction>> {
    sqlx::query_as::<_, StoredDeduction>(
        "SELECT fingerprint, response_status, response_body FROM deductions WHERE deduction_id = $1",
    )
    .bind(deduction_id)
    .fetch_optional(conn)
    .await
}

/// Records the outcome; `false` when the id is taken already (a concurrent first request
/// committed first: the unique key decided), in which case nothing was written.
pub async fn insert(conn: &mut PgConnection, deduction: &NewDeduction<'_>) -> sqlx::Result<bool> {
    let result = sqlx::query(
        "INSERT INTO deductions (deduction_id, fingerprint, items, status, rejection_reason, \
         response_status, response_body) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT ON CONSTRAINT deductions_pkey DO NOTHING",
    )
    .bind(deduction.deduction_id)
    .bind(deduction.fingerprint)
    .bind(&deduction.items)
    .bind(deduction.status)
    .bind(deduction.rejection_reason)
    .bind(i16::try_from(deduction.response_status).unwrap_or(500))
    .bind(deduction.response_body)
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}
