//! `processed_messages`: the ids of the messages a consumer applied, written in the same
//! transaction as their effect, so a redelivery is recognised and changes nothing.

use sqlx::PgConnection;
use uuid::Uuid;

/// Records every message id in one statement; how many were new. Fewer than given means
/// another consumer recorded some of them since the caller looked: the caller rolls back
/// and tries again, to find them recorded.
pub async fn record_all(conn: &mut PgConnection, messages: &[(Uuid, &str)]) -> sqlx::Result<u64> {
    if messages.is_empty() {
        return Ok(0);
    }
    let (ids, kinds): (Vec<Uuid>, Vec<&str>) = messages.iter().copied().unzip();
    let done = sqlx::query!(
        "INSERT INTO processed_messages (message_id, kind)
         SELECT * FROM unnest($1::uuid[], $2::text[]) ON CONFLICT DO NOTHING",
        &ids,
        &kinds as &[&str],
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Which of `ids` were recorded already.
pub async fn recorded_among(conn: &mut PgConnection, ids: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        "SELECT message_id FROM processed_messages WHERE message_id = ANY($1)",
        ids,
    )
    .fetch_all(conn)
    .await
}
