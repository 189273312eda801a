//! Consumer-side deduplication: every consumed message id is recorded in the same
//! transaction as the change it causes, so a redelivered message changes nothing.
//! Both services own a `processed_messages` table of the same shape.

use sqlx::PgConnection;
use uuid::Uuid;

/// The primary key of `processed_messages`: a statement that records a message id seen before
/// fails on it.
pub const MESSAGE_ID_KEY: &str = "processed_messages_pkey";

/// Records `message_id`; `true` the first time, `false` when it was already processed.
/// A concurrent duplicate waits on the primary key until the first commits or rolls back.
pub async fn record_once(
    conn: &mut PgConnection,
    message_id: Uuid,
    kind: &str,
) -> sqlx::Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO processed_messages (message_id, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(message_id)
    .bind(kind)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}
