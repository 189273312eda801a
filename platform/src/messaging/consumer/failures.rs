//! Failures counted per message id by the service (`message_failures`), which decides when a
//! message that keeps failing is dead-lettered.
//!
//! The broker's own count (`x-delivery-count`) cannot decide it: a quorum queue counts every
//! return of an unacked message, and a channel that closes (a consumer killed, a connection
//! lost) returns everything it held, up to a whole prefetch window of valid messages. Crashes
//! would dead-letter messages nothing is wrong with. So the consumer dead-letters on its own
//! count of real failures, [`FAILURE_LIMIT`], and the queue's delivery limit
//! ([`shared::keys::DELIVERY_LIMIT`]) is only a backstop far above it.

use std::collections::HashMap;
use std::future::Future;

use sqlx::PgPool;
use uuid::Uuid;

/// Failures of one message (errors, not contention) after which it is dead-lettered.
pub const FAILURE_LIMIT: i32 = 5;

/// What the consumer loop asks of the database, beside what its handler applies: the
/// failure counts, and whether the database answers at all. PostgreSQL's answers are here;
/// MySQL's are [`crate::storage::mysql::consumer`].
pub trait ConsumerStore: Clone + Send + Sync + 'static {
    /// Adds one failure to each message of `failed` (id, error) in one statement; the count
    /// of each afterwards. An id given twice counts once.
    fn count_failures(
        &self,
        failed: &[(Uuid, String)],
    ) -> impl Future<Output = sqlx::Result<HashMap<Uuid, i32>>> + Send;

    /// Whether the database answers a trivial statement.
    fn answers(&self) -> impl Future<Output = bool> + Send;
}

/// `failed` without its repeated ids (the first error of each kept), in order.
fn first_of_each(failed: &[(Uuid, String)]) -> Vec<(Uuid, &str)> {
    let mut unique: Vec<(Uuid, &str)> = Vec::with_capacity(failed.len());
    for (id, error) in failed {
        if !unique.iter().any(|(seen, _)| seen == id) {
            unique.push((*id, error.as_str()));
        }
    }
    unique
}

impl ConsumerStore for PgPool {
    async fn count_failures(&self, failed: &[(Uuid, String)]) -> sqlx::Result<HashMap<Uuid, i32>> {
        let (ids, errors): (Vec<Uuid>, Vec<&str>) = first_of_each(failed).into_iter().unzip();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        count(self, &ids, &errors).await
    }

    async fn answers(&self) -> bool {
        sqlx::query_scalar!(r#"SELECT 1 AS "ping!""#)
            .fetch_one(self)
            .await
            .is_ok()
    }
}

async fn count(db: &PgPool, ids: &[Uuid], errors: &[&str]) -> sqlx::Result<HashMap<Uuid, i32>> {
    let rows = sqlx::query!(
        "INSERT INTO message_failures (message_id, failures, last_error)
         SELECT id, 1, error FROM unnest($1::uuid[], $2::text[]) AS f (id, error)
         ON CONFLICT ON CONSTRAINT message_failures_pkey DO UPDATE
            SET failures = message_failures.failures + 1, last_error = EXCLUDED.last_error,
                updated_at = now()
         RETURNING message_id, failures",
        ids,
        errors as &[&str],
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.message_id, row.failures))
        .collect())
}
