//! What consumers keep about messages: failure counts per message id, and the retention of
//! both that and the processed message ids.

use std::time::Duration;

use sqlx::{Acquire, MySql, MySqlExecutor};
use uuid::Uuid;

use crate::{fitting_error, json_ids, micros};

/// Adds one failure to each message of `failed` (id, error; ids given once each) and returns
/// each one's count afterwards, in one transaction: MariaDB's `INSERT … RETURNING` does not
/// return what `ON DUPLICATE KEY UPDATE` made of a row, so the counts are read back, under
/// the row locks the insert took (no other consumer's count can slip in between).
pub async fn count_failures<'c>(
    conn: impl Acquire<'c, Database = MySql>,
    failed: &[(Uuid, &str)],
) -> sqlx::Result<Vec<(Uuid, i32)>> {
    if failed.is_empty() {
        return Ok(Vec::new());
    }
    let json = serde_json::Value::Array(
        failed
            .iter()
            .map(|(id, error)| {
                serde_json::json!({ "id": id.to_string(), "error": fitting_error(error) })
            })
            .collect(),
    )
    .to_string();
    let ids: Vec<Uuid> = failed.iter().map(|(id, _)| *id).collect();
    let mut tx = conn.begin().await?;
    sqlx::query!(
        "INSERT INTO message_failures (message_id, failures, last_error)
         SELECT UNHEX(REPLACE(f.id, '-', '')), 1, f.error
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             id CHAR(36) PATH '$.id',
             error TEXT PATH '$.error')) AS f
         ON DUPLICATE KEY UPDATE failures = failures + 1, last_error = VALUES(last_error),
                                 updated_at = NOW(6)",
        json,
    )
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query!(
        "SELECT m.message_id AS `message_id: Uuid`, m.failures
         FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(36) PATH '$')) AS j
         STRAIGHT_JOIN message_failures AS m ON m.message_id = UNHEX(REPLACE(j.id, '-', ''))",
        json_ids(&ids),
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.message_id, row.failures))
        .collect())
}

/// Deletes at most `batch` processed message ids older than `keep`; how many.
pub async fn delete_processed_before(
    db: impl MySqlExecutor<'_>,
    keep: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM processed_messages WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND
         ORDER BY processed_at LIMIT ?",
        micros(keep),
        batch,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes at most `batch` failure counts untouched for longer than `keep`; how many.
pub async fn delete_failures_before(
    db: impl MySqlExecutor<'_>,
    keep: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM message_failures WHERE updated_at < NOW(6) - INTERVAL ? MICROSECOND
         ORDER BY updated_at LIMIT ?",
        micros(keep),
        batch,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Whether the database answers a trivial statement.
pub async fn answers(db: impl MySqlExecutor<'_>) -> bool {
    sqlx::query_scalar!("SELECT 1 AS `ping!: i32`")
        .fetch_one(db)
        .await
        .is_ok()
}
