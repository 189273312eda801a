//! What consumers keep about messages: failure counts per message id (`message_failures`),
//! and the retention of those and of the processed message ids (`processed_messages`). The
//! MySQL forms of `platform::messaging::consumer::failures` and of the retention sweep.

use std::time::Duration;

use sqlx::{Acquire, MySql, MySqlExecutor};
use uuid::Uuid;

use crate::{first_of_each, fitting_error, json_ids, micros};

/// Adds one failure to each message of `failed` (message id, error) and returns each one's
/// count afterwards, in the order of `failed`. An id given twice counts once, with its first
/// error. A message's first failure inserts its row with a count of 1; each one records its
/// error as the last (cut to [`crate::MAX_ERROR_BYTES`]).
///
/// Two statements, in a transaction of their own: MariaDB has no `UPDATE … RETURNING`, and
/// its `INSERT … RETURNING` does not report what `ON DUPLICATE KEY UPDATE` made of a row, so
/// the counts are read back after the upsert, on the same connection, while the upsert's row
/// locks still keep other consumers' counts of the same messages out. The transaction is
/// begun here rather than left to the caller, so the two can never be split across
/// connections or commits; `conn` is anything that hands out one connection (a pool, a
/// `&mut MySqlConnection`; inside a caller's transaction this one is a savepoint).
pub async fn count_failures<'c>(
    conn: impl Acquire<'c, Database = MySql>,
    failed: &[(Uuid, &str)],
) -> sqlx::Result<Vec<(Uuid, i32)>> {
    let failed = first_of_each(failed);
    if failed.is_empty() {
        return Ok(Vec::new());
    }
    // The upsert locks the rows in the order it inserts them: always the ids' byte order, so
    // that two consumers counting the same messages lock them in the same order and cannot
    // deadlock on each other.
    let mut in_lock_order = failed.clone();
    in_lock_order.sort_unstable_by_key(|(id, _)| *id);
    let json = serde_json::Value::Array(
        in_lock_order
            .iter()
            .map(|(id, error)| {
                serde_json::json!({ "id": id.to_string(), "error": fitting_error(error) })
            })
            .collect(),
    )
    .to_string();
    let ids: Vec<Uuid> = failed.iter().map(|(id, _)| *id).collect();

    let mut tx = conn.begin().await?;
    // `VALUES(last_error)` is the value this row would have inserted: MariaDB has no row
    // alias (`AS new`), and MySQL 8 still accepts `VALUES()`, deprecated.
    sqlx::query!(
        "INSERT INTO message_failures (message_id, failures, last_error)
         SELECT UNHEX(REPLACE(f.id, '-', '')), 1, f.error
         FROM JSON_TABLE(?, '$[*]' COLUMNS (
             n FOR ORDINALITY,
             id CHAR(36) PATH '$.id',
             error TEXT PATH '$.error')) AS f
         ORDER BY f.n
         ON DUPLICATE KEY UPDATE failures = message_failures.failures + 1,
                                 last_error = VALUES(last_error), updated_at = NOW(6)",
        json,
    )
    .execute(&mut *tx)
    .await?;
    // STRAIGHT_JOIN: the ids first, each row then by primary key.
    let counts = sqlx::query!(
        "SELECT m.message_id AS `message_id: Uuid`, m.failures
         FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, id CHAR(36) PATH '$')) AS f
         STRAIGHT_JOIN message_failures AS m FORCE INDEX (PRIMARY) ON m.message_id = UNHEX(REPLACE(f.id, '-', ''))
         ORDER BY f.n",
        json_ids(&ids),
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(counts
        .into_iter()
        .map(|row| (row.message_id, row.failures))
        .collect())
}

/// Deletes at most `batch` processed message ids recorded more than `keep` ago, oldest
/// first; how many it deleted. (`processed_messages_oldest_first` is the table's only
/// secondary index, and MariaDB reads it in order and stops at the limit.)
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

/// Deletes at most `batch` failure counts last changed more than `keep` ago, oldest first;
/// how many it deleted (by `message_failures_oldest_first`, as above).
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

/// Whether the database answers a trivial statement: the consumer loop's check,
/// [`crate::admin::ping`] as a yes or no.
pub async fn answers(db: impl MySqlExecutor<'_>) -> bool {
    crate::admin::ping(db).await.is_ok()
}
