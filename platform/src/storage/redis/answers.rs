//! The connection as redis-rs sees it: each command goes to the current primary, and an
//! answer that says the node is no primary any more sends the connection looking for the
//! one that is.

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use super::RedisConnection;

/// Whether `error` says the node is no primary now: it did not answer (dead, or cut off),
/// or it answered as a replica (`READONLY`: demoted by a failover; `MASTERDOWN`: a replica
/// that lost its own primary).
pub(super) fn primary_lost(error: &RedisError) -> bool {
    crate::storage::redis::health::is_unreachable(error) || demoted_code(error.code())
}

fn demoted_code(code: Option<&str>) -> bool {
    matches!(code, Some("READONLY" | "MASTERDOWN"))
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.current()?;
            let result = conn.req_packed_command(cmd).await;
            self.check(result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.current()?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            // A pipeline's replies come back one by one, errors among them.
            if let Ok(replies) = &result
                && replies.iter().any(
                    |reply| matches!(reply, Value::ServerError(e) if demoted_code(Some(e.code()))),
                )
            {
                self.find_primary();
            }
            self.check(result)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}
