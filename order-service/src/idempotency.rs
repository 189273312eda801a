//! Idempotency tokens in Redis.
//!
//! A token's key holds one of three states, and every change is one atomic Lua script
//! (never check-then-set):
//! - `issued` — handed out by `POST /idempotency-tokens`, expires after the token TTL;
//! - `inflight:<fingerprint>:<claimed_at_ms>` — a request is creating the order. A claim
//!   older than [`IN_FLIGHT_TTL`] is stale (its process died): the next request may claim the
//!   token again, and PostgreSQL's unique key decides if the dead one had committed after all;
//! - `done:<json>` — the first response, kept for the token TTL for cheap replays.
//!
//! Redis is a cache of the truth here: the outcome is also committed in PostgreSQL with the
//! order (see `db::idempotency`), which is what replays fall back on once Redis forgot.

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Script;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use shared::keys::RedisKeys;
use uuid::Uuid;

/// Longest time a request may hold a token in flight; well above the request timeout.
pub const IN_FLIGHT_TTL: Duration = Duration::from_secs(30);

const ISSUED: &str = "issued";
const IN_FLIGHT: &str = "inflight:";
const DONE: &str = "done:";

/// The first response to a token, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub fingerprint: String,
    pub order_id: Uuid,
    pub status: u16,
    pub body: String,
}

/// What claiming a token found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The token was `issued`; this request now owns it.
    Claimed,
    /// Never issued, expired, or forgotten by Redis: ask PostgreSQL.
    Unknown,
    /// Another request holds it.
    InFlight { fingerprint: String },
    /// Already used; here is the first response.
    Done(StoredResponse),
}

#[derive(Clone)]
pub struct TokenStore {
    redis: ConnectionManager,
    keys: RedisKeys,
    ttl: Duration,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl TokenStore {
    pub fn new(redis: ConnectionManager, keys: RedisKeys, ttl: Duration) -> Self {
        Self { redis, keys, ttl }
    }

    /// Issues a new token; returns it with its expiry.
    pub async fn issue(&self) -> redis::RedisResult<(Uuid, DateTime<Utc>)> {
        let token = Uuid::new_v4();
        let expires_at = Utc::now() + self.ttl;
        let mut conn = self.redis.clone();
        redis::cmd("SET")
            .arg(self.keys.idempotency_token(&token))
            .arg(ISSUED)
            .arg("PXAT")
            .arg(expires_at.timestamp_millis())
            .arg("NX")
            .query_async::<()>(&mut conn)
            .await?;
        Ok((token, expires_at))
    }

    /// Atomically moves an `issued` token (or one whose claim went stale) to in flight for
    /// `fingerprint`, or reports its state. The token keeps its original expiry.
    pub async fn claim(&self, token: &Uuid, fingerprint: &str) -> redis::RedisResult<Claim> {
        static CLAIM: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
            Script::new(
                r"
                local v = redis.call('GET', KEYS[1])
                if not v then return '' end
                local t = redis.call('TIME')
                local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
                local stale = false
                if string.sub(v, 1, 9) == 'inflight:' then
                    local claimed_at = tonumber(string.match(v, ':(%d+)$'))
                    stale = claimed_at ~= nil and now - claimed_at > tonumber(ARGV[2])
                end
                if v == 'issued' or stale then
                    redis.call('SET', KEYS[1], ARGV[1] .. ':' .. now, 'KEEPTTL')
                    return 'claimed'
                end
                return v
                ",
            )
        });
        let mut conn = self.redis.clone();
        let state: String = CLAIM
            .key(self.keys.idempotency_token(token))
            .arg(format!("{IN_FLIGHT}{fingerprint}"))
            .arg(IN_FLIGHT_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(parse_state(&state))
    }

    /// Records the first response, replacing the in-flight state.
    pub async fn complete(
        &self,
        token: &Uuid,
        response: &StoredResponse,
    ) -> redis::RedisResult<()> {
        let value = format!(
            "{DONE}{}",
            serde_json::to_string(response).unwrap_or_default()
        );
        let mut conn = self.redis.clone();
        redis::cmd("SET")
            .arg(self.keys.idempotency_token(token))
            .arg(value)
            .arg("PX")
            .arg(self.ttl.as_millis() as u64)
            .query_async::<()>(&mut conn)
            .await
    }

    /// Gives the token back (`issued`, original expiry kept) after a failure that created
    /// nothing, so the client can retry with it. Only if this request still holds it.
    pub async fn release(&self, token: &Uuid, fingerprint: &str) -> redis::RedisResult<()> {
        static RELEASE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
            Script::new(
                r"
                local v = redis.call('GET', KEYS[1])
                local prefix = ARGV[1] .. ':'
                if v and string.sub(v, 1, string.len(prefix)) == prefix then
                    redis.call('SET', KEYS[1], 'issued', 'KEEPTTL')
                    return 1
                end
                return 0
                ",
            )
        });
        let mut conn = self.redis.clone();
        RELEASE
            .key(self.keys.idempotency_token(token))
            .arg(format!("{IN_FLIGHT}{fingerprint}"))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
    }
}

fn parse_state(state: &str) -> Claim {
    if state == "claimed" {
        Claim::Claimed
    } else if let Some(rest) = state.strip_prefix(IN_FLIGHT) {
        let fingerprint = rest.split(':').next().unwrap_or_default().to_owned();
        Claim::InFlight { fingerprint }
    } else if let Some(json) = state.strip_prefix(DONE) {
        serde_json::from_str(json).map_or(Claim::Unknown, Claim::Done)
    } else {
        // '' (no key) or `issued` seen by a script that did not claim it.
        Claim::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse() {
        assert_eq!(parse_state("claimed"), Claim::Claimed);
        assert_eq!(parse_state(""), Claim::Unknown);
        assert_eq!(
            parse_state("inflight:abc:123"),
            Claim::InFlight {
                fingerprint: "abc".into()
            }
        );
        let done = StoredResponse {
            fingerprint: "f".into(),
            order_id: Uuid::nil(),
            status: 202,
            body: "{}".into(),
        };
        let raw = format!("done:{}", serde_json::to_string(&done).unwrap_or_default());
        assert_eq!(parse_state(&raw), Claim::Done(done));
    }
}
