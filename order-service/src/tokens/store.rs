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
//! With end-user identity on, each state names the user who took the token (its taker):
//! `issued:<user>`, `inflight:<fingerprint>@<user>:<ms>`, and `taker` in the response. A
//! token is claimed only by its taker; anyone else is told whose state it is and refused. The
//! taker is also committed with the outcome and signed into the token itself, so the binding
//! outlives Redis's keys. Without identity the states are exactly the ones above.
//!
//! Redis is a cache of the truth here: the outcome is also committed in PostgreSQL with the
//! order (see [`crate::tokens::queries`]), which is what replays fall back on once Redis forgot.
//! And a token proves by itself that it was issued here and until when
//! ([`crate::tokens::signed`]), so one Redis forgot can be claimed again (the
//! `recreate_until` of [`TokenStore::claim_all`]) instead of being refused as never issued.
//!
//! Orders are placed in batches ([`crate::orders::intake`]), so the calls here take many tokens at
//! once: a batch claims all its tokens in one round trip and records all its outcomes in one.
//!
//! Every call goes through the process's [`RedisHealth`]: while Redis is known down, none is
//! sent and the caller learns it at once ([`RedisCallError::Down`]).

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::{RedisCallError, RedisHealth};
use redis::Script;
use shared::ids::UserId;
use shared::keys::RedisKeys;
use uuid::Uuid;

use super::state::{DONE, in_flight, issued, parse_state};
use crate::tokens::StoredResponse;
use crate::tokens::signed::TokenSigner;

pub use super::state::Claim;

/// Longest time a request may hold a token in flight; well above the request timeout.
pub const IN_FLIGHT_TTL: Duration = Duration::from_secs(30);

/// New tokens tried when the one minted is taken (34 random bits per expiry millisecond
/// make even a second try a rarity).
const ISSUE_TRIES: usize = 4;

/// Claims the tokens of a batch, in order, each keeping its expiry: the request taker's own
/// `issued` state (or its own stale claim) becomes in flight for its request; any other state
/// is returned as it is. `ARGV[1]` is the age of a stale claim; then each key `i` has its
/// in-flight value at `ARGV[3i-1]`, at `ARGV[3i]` an expiry in unix ms or `''`, and at
/// `ARGV[3i+1]` the `issued` state of the request's taker. With an expiry, a token Redis does
/// not know is claimed too, expiring then (the caller has checked the token was issued here,
/// to this taker, and is unexpired; PostgreSQL's unique key settles whether it was used).
/// Keys are handled in order inside one script, so a second request for a token in the same
/// batch finds the first one's claim.
static CLAIM: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local out = {}
        local function taker(inflight)
            return string.match(inflight, '^inflight:[^:]*@(%d+)') or ''
        end
        for i, key in ipairs(KEYS) do
            local claim = ARGV[3 * i - 1] .. ':' .. now
            local recreate_until = ARGV[3 * i]
            local issued = ARGV[3 * i + 1]
            local v = redis.call('GET', key)
            if not v then
                -- A forgotten token is claimed again only while it is alive: one that expired
                -- while its request queued is unknown, as if Redis had expired it itself.
                if recreate_until == '' or tonumber(recreate_until) <= now then
                    out[i] = ''
                else
                    redis.call('SET', key, claim, 'PXAT', recreate_until)
                    out[i] = 'claimed'
                end
            else
                local stale = false
                if string.sub(v, 1, 9) == 'inflight:' then
                    local claimed_at = tonumber(string.match(v, ':(%d+)$'))
                    stale = claimed_at ~= nil and now - claimed_at > tonumber(ARGV[1])
                        and taker(v) == taker(ARGV[3 * i - 1])
                end
                if v == issued or stale then
                    redis.call('SET', key, claim, 'KEEPTTL')
                    out[i] = 'claimed'
                else
                    out[i] = v
                end
            end
        end
        return out
        ",
    )
});

/// Gives tokens back (`ARGV[2i]`, their taker's `issued` state, expiry kept) if their
/// requests still hold them: key `i` only while its value starts with `ARGV[2i-1]`.
static RELEASE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
        for i, key in ipairs(KEYS) do
            local v = redis.call('GET', key)
            local prefix = ARGV[2 * i - 1] .. ':'
            if v and string.sub(v, 1, string.len(prefix)) == prefix then
                redis.call('SET', key, ARGV[2 * i], 'KEEPTTL')
            end
        end
        return 0
        ",
    )
});

#[derive(Clone)]
pub struct TokenStore {
    redis: RedisConnection,
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
        redis: RedisConnection,
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

    /// The expiry of `token` if it was issued here to `taker` and has not expired, whether
    /// or not Redis still knows it.
    pub fn live_expiry(&self, token: &Uuid, taker: Option<UserId>) -> Option<DateTime<Utc>> {
        self.signer.is_live(token, taker, Utc::now())
    }

    /// Issues a new token to `taker` (`None` without identity); returns it with its expiry.
    pub async fn issue(
        &self,
        taker: Option<UserId>,
    ) -> Result<(Uuid, DateTime<Utc>), RedisCallError> {
        // Redis and the token carry the expiry in milliseconds: the same instant for both.
        let expires_at = (Utc::now() + self.ttl).trunc_subsecs(3);
        for _ in 0..ISSUE_TRIES {
            let token = self.signer.mint(expires_at, taker);
            let mut conn = self.redis.clone();
            let mut set = redis::cmd("SET");
            set.arg(self.keys.idempotency_token(&token))
                .arg(issued(taker))
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

    /// Claims every token of a batch in one round trip: an `issued` token (or one whose claim
    /// went stale) moves to in flight for its request, keeping its original expiry; any other
    /// state is reported. A token Redis does not know is claimed as well when its request
    /// carries `recreate_until` (see [`TokenStore::live_expiry`]): Redis lost it. The answer
    /// is index-aligned with `claims`.
    pub async fn claim_all(
        &self,
        claims: &[ClaimRequest<'_>],
    ) -> Result<Vec<Claim>, RedisCallError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = CLAIM.prepare_invoke();
        invocation.arg(IN_FLIGHT_TTL.as_millis() as u64);
        for claim in claims {
            invocation
                .key(self.keys.idempotency_token(claim.token))
                .arg(in_flight(claim.fingerprint, claim.taker))
                .arg(
                    claim
                        .recreate_until
                        .map_or(String::new(), |at| at.timestamp_millis().to_string()),
                )
                .arg(issued(claim.taker));
        }
        let mut conn = self.redis.clone();
        let states: Vec<String> = self.health.call(invocation.invoke_async(&mut conn)).await?;
        Ok(states.iter().map(|state| parse_state(state)).collect())
    }

    /// Records the first responses of many tokens in one round trip, replacing their
    /// in-flight states.
    pub async fn complete_all(
        &self,
        done: &[(Uuid, &StoredResponse)],
    ) -> Result<(), RedisCallError> {
        if done.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (token, response) in done {
            let key = self.keys.idempotency_token(token);
            let value = match serde_json::to_string(response) {
                Ok(json) => format!("{DONE}{json}"),
                Err(error) => {
                    // Never a `done:` without its response. Forgetting the token instead sends
                    // its replays to PostgreSQL, which committed the outcome with the order.
                    tracing::error!(%error, %token, "cannot cache a first response; forgetting the token");
                    pipe.cmd("DEL").arg(key).ignore();
                    continue;
                }
            };
            pipe.cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(self.ttl.as_millis() as u64)
                .ignore();
        }
        let mut conn = self.redis.clone();
        self.health.call(pipe.query_async::<()>(&mut conn)).await
    }

    /// Gives tokens back (`issued` to their takers, original expiry kept) after a failure
    /// that created nothing, so their clients can retry with them; each only if its request
    /// still holds it. One round trip.
    pub async fn release_all(&self, held: &[Held<'_>]) -> Result<(), RedisCallError> {
        if held.is_empty() {
            return Ok(());
        }
        let mut invocation = RELEASE.prepare_invoke();
        for held in held {
            invocation
                .key(self.keys.idempotency_token(held.token))
                .arg(in_flight(held.fingerprint, held.taker))
                .arg(issued(held.taker));
        }
        let mut conn = self.redis.clone();
        self.health
            .call(invocation.invoke_async::<i64>(&mut conn))
            .await
            .map(drop)
    }
}

/// One token of a batch to claim for a request.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub token: &'a Uuid,
    /// The request's body fingerprint, which the in-flight state carries.
    pub fingerprint: &'a str,
    /// The token's own expiry when it proves it was issued here and is unexpired: then a
    /// token Redis forgot is claimed again instead of being unknown.
    pub recreate_until: Option<DateTime<Utc>>,
    /// The user the request comes from (`None` without identity).
    pub taker: Option<UserId>,
}

/// A token a request holds in flight, to give back.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    pub token: &'a Uuid,
    pub fingerprint: &'a str,
    pub taker: Option<UserId>,
}
