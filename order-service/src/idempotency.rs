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
//! And a token proves by itself that it was issued here and until when
//! ([`crate::signed_token`]), so one Redis forgot can be claimed again
//! ([`TokenStore::reclaim`]) instead of being refused as never issued.
//!
//! Every call goes through the process's [`RedisHealth`]: while Redis is known down, none is
//! sent and the caller learns it at once ([`RedisCallError::Down`]).

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use platform::redis_health::{RedisCallError, RedisHealth};
use redis::Script;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use shared::keys::RedisKeys;
use uuid::Uuid;

use crate::signed_token::TokenSigner;

/// Longest time a request may hold a token in flight; well above the request timeout.
pub const IN_FLIGHT_TTL: Duration = Duration::from_secs(30);

/// New tokens tried when the one minted is taken (34 random bits per expiry millisecond
/// make even a second try a rarity).
const ISSUE_TRIES: usize = 4;

/// Claims a token: `issued` (or a stale claim) becomes in flight for `ARGV[1]`, keeping its
/// expiry; any other state is returned as it is. With `ARGV[3]` (an expiry in unix ms), a
/// token Redis does not know is claimed too, expiring then: the caller has checked the token
/// was issued and that PostgreSQL has no outcome for it.
static CLAIM: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
        local v = redis.call('GET', KEYS[1])
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        if not v then
            if ARGV[3] == '' then return '' end
            redis.call('SET', KEYS[1], ARGV[1] .. ':' .. now, 'PXAT', ARGV[3])
            return 'claimed'
        end
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
    signer: TokenSigner,
    health: RedisHealth,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("ttl", &self.ttl)
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

impl TokenStore {
    pub fn new(
        redis: ConnectionManager,
        keys: RedisKeys,
        ttl: Duration,
        signer: TokenSigner,
        health: RedisHealth,
    ) -> Self {
        Self {
            redis,
            keys,
            ttl,
            signer,
            health,
        }
    }

    /// Whether Redis is known down (then every call here fails at once).
    pub fn redis_down(&self) -> bool {
        self.health.is_down()
    }

    /// The expiry of `token` if it was issued here and has not expired, whether or not
    /// Redis still knows it.
    pub fn live_expiry(&self, token: &Uuid) -> Option<DateTime<Utc>> {
        self.signer.is_live(token, Utc::now())
    }

    /// Issues a new token; returns it with its expiry.
    pub async fn issue(&self) -> Result<(Uuid, DateTime<Utc>), RedisCallError> {
        // Redis and the token carry the expiry in milliseconds: the same instant for both.
        let expires_at = (Utc::now() + self.ttl).trunc_subsecs(3);
        for _ in 0..ISSUE_TRIES {
            let token = self.signer.mint(expires_at);
            let mut conn = self.redis.clone();
            let mut set = redis::cmd("SET");
            set.arg(self.keys.idempotency_token(&token))
                .arg(ISSUED)
                .arg("PXAT")
                .arg(expires_at.timestamp_millis())
                .arg("NX");
            let set = set.query_async::<Option<String>>(&mut conn);
            // `None`: the key exists, so another client holds this token; mint another.
            if self.health.call(set).await?.is_some() {
                return Ok((token, expires_at));
            }
        }
        Err(RedisCallError::Failed(redis::RedisError::from((
            redis::ErrorKind::Client,
            "every token minted was taken",
        ))))
    }

    /// Atomically moves an `issued` token (or one whose claim went stale) to in flight for
    /// `fingerprint`, or reports its state. The token keeps its original expiry.
    pub async fn claim(&self, token: &Uuid, fingerprint: &str) -> Result<Claim, RedisCallError> {
        self.run_claim(token, fingerprint, None).await
    }

    /// [`TokenStore::claim`], but a token Redis does not know is claimed as well, to expire
    /// at `expires_at`. Only for a token known to be issued (see
    /// [`TokenStore::live_expiry`]) whose outcome PostgreSQL does not have: Redis lost it.
    pub async fn reclaim(
        &self,
        token: &Uuid,
        fingerprint: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, RedisCallError> {
        self.run_claim(token, fingerprint, Some(expires_at)).await
    }

    async fn run_claim(
        &self,
        token: &Uuid,
        fingerprint: &str,
        recreate_until: Option<DateTime<Utc>>,
    ) -> Result<Claim, RedisCallError> {
        let mut conn = self.redis.clone();
        let mut invocation = CLAIM.key(self.keys.idempotency_token(token));
        invocation
            .arg(format!("{IN_FLIGHT}{fingerprint}"))
            .arg(IN_FLIGHT_TTL.as_millis() as u64)
            .arg(recreate_until.map_or(String::new(), |at| at.timestamp_millis().to_string()));
        let state: String = self.health.call(invocation.invoke_async(&mut conn)).await?;
        Ok(parse_state(&state))
    }

    /// Records the first response, replacing the in-flight state.
    pub async fn complete(
        &self,
        token: &Uuid,
        response: &StoredResponse,
    ) -> Result<(), RedisCallError> {
        let value = format!(
            "{DONE}{}",
            serde_json::to_string(response).unwrap_or_default()
        );
        let mut conn = self.redis.clone();
        let mut set = redis::cmd("SET");
        set.arg(self.keys.idempotency_token(token))
            .arg(value)
            .arg("PX")
            .arg(self.ttl.as_millis() as u64);
        self.health.call(set.query_async::<()>(&mut conn)).await
    }

    /// Gives the token back (`issued`, original expiry kept) after a failure that created
    /// nothing, so the client can retry with it. Only if this request still holds it.
    pub async fn release(&self, token: &Uuid, fingerprint: &str) -> Result<(), RedisCallError> {
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
        let mut invocation = RELEASE.key(self.keys.idempotency_token(token));
        invocation.arg(format!("{IN_FLIGHT}{fingerprint}"));
        self.health
            .call(invocation.invoke_async::<i64>(&mut conn))
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
