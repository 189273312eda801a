//! [`TokenStore::complete_all`]: a batch's first responses, each replacing its token's claim,
//! in one round trip (one pipeline per slot on a cluster, all sent at once).

use std::time::Duration;

use futures_util::future::try_join_all;
use platform::storage::redis::health::RedisCallError;
use uuid::Uuid;

use super::TokenStore;
use crate::tokens::StoredResponse;
use crate::tokens::state::DONE;

impl TokenStore {
    /// Records the first responses of many tokens in one round trip, replacing their
    /// in-flight states.
    pub async fn complete_all(
        &self,
        done: &[(Uuid, &StoredResponse)],
    ) -> Result<(), RedisCallError> {
        if done.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = done
            .iter()
            .map(|(token, _)| self.keys.idempotency_token(token))
            .collect();
        // A pipeline may not span a cluster's slots: one per slot there, all sent at once.
        let mut pipes: Vec<redis::Pipeline> = Vec::new();
        for group in self.redis.slot_groups(&keys) {
            let mut pipe = redis::pipe();
            for i in group {
                let (token, response) = &done[i];
                let key = &keys[i];
                set_done(&mut pipe, key, token, response, self.ttl);
            }
            pipes.push(pipe);
        }
        let set = || {
            let conn = self.redis.clone();
            let pipes = &pipes;
            async move {
                try_join_all(pipes.iter().map(|pipe| {
                    let mut conn = conn.clone();
                    async move { pipe.query_async::<()>(&mut conn).await }
                }))
                .await
                .map(drop)
            }
        };
        self.health.call(set).await
    }
}

/// Adds to `pipe` the write of `token`'s first response under `key`, replacing its claim.
fn set_done(
    pipe: &mut redis::Pipeline,
    key: &str,
    token: &Uuid,
    response: &StoredResponse,
    ttl: Duration,
) {
    let value = match serde_json::to_string(response) {
        Ok(json) => format!("{DONE}{json}"),
        Err(error) => {
            // Never a `done:` without its response. Forgetting the token instead sends its
            // replays to PostgreSQL, which committed the outcome with the order.
            tracing::error!(%error, %token, "cannot cache a first response; forgetting the token");
            pipe.cmd("DEL").arg(key).ignore();
            return;
        }
    };
    pipe.cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .ignore();
}
