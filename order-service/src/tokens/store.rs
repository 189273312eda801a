//! Idempotency tokens in Redis.
//!
//! A token's key holds one of three states, and every change is one atomic Lua script
//! (never check-then-set):
//! - `issued` — handed out by `POST /idempotency-tokens`, expires after the token TTL;
//! - `inflight:<fingerprint>:<claimed_at_ms>` — a request is creating the order. A claim
//!   older than [`IN_FLIGHT_TTL`] is stale (its process died): the next request may claim the
//!   token again, and PostgreSQL's unique key decides if the dead one had committed after all.
//!   Its claim id, random per claim, sits beside it under the token's claim key
//!   ([`super::scripts`]), so that a claim run again (its connection broke) recognises its
//!   own first run;
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
//! sent and the caller learns it at once ([`RedisCallError::Down`]); a call whose connection
//! broke runs once more on a new one, so each is safe to run twice. A claim that failed
//! without an answer (a hung Redis runs it later) is given back once Redis answers again
//! ([`TokenStore::give_back_abandoned`]): its request is not running, and its retries must not
//! be told it is in flight.

mod complete;
mod give_back;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};
use futures_util::future::try_join_all;
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::{RedisCallError, RedisHealth};
use shared::ids::UserId;
use shared::keys::RedisKeys;
use uuid::Uuid;

use give_back::{Abandoned, Giving};

use super::scripts::CLAIM;
use super::state::{in_flight, issued, parse_state};
use crate::tokens::signed::TokenSigner;

pub use super::state::Claim;

/// Longest time a request may hold a token in flight; well above the request timeout.
pub const IN_FLIGHT_TTL: Duration = Duration::from_secs(30);

/// New tokens tried when the one minted is taken (34 random bits per expiry millisecond
/// make even a second try a rarity).
const ISSUE_TRIES: usize = 4;

#[derive(Clone)]
pub struct TokenStore {
    redis: RedisConnection,
    keys: RedisKeys,
    ttl: Duration,
    signer: TokenSigner,
    health: RedisHealth,
    /// Claims sent without an answer, to give back once Redis answers again.
    abandoned: Arc<Mutex<Vec<Abandoned>>>,
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
            abandoned: Arc::default(),
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
            let mut set = redis::cmd("SET");
            set.arg(self.keys.idempotency_token(&token))
                .arg(issued(taker))
                .arg("PXAT")
                .arg(expires_at.timestamp_millis())
                .arg("NX");
            // `None`: the key exists, so another client holds this token (or a first run
            // whose reply was lost set it); mint another.
            let set = || {
                let mut conn = self.redis.clone();
                let set = &set;
                async move { set.query_async::<Option<String>>(&mut conn).await }
            };
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
        self.release_abandoned().await;
        let ids: Vec<String> = claims
            .iter()
            .map(|_| Uuid::new_v4().simple().to_string())
            .collect();
        // One script per slot on a Redis Cluster (a token's two keys share its hash tag);
        // one for the whole batch on one Redis. Each token is decided alone, so nothing is
        // lost by the cut: a token twice in a batch is one slot, claimed in arrival order.
        let keys: Vec<String> = claims
            .iter()
            .map(|claim| self.keys.idempotency_token(claim.token))
            .collect();
        let groups = self.redis.slot_groups(&keys);
        let invocations: Vec<_> = groups
            .iter()
            .map(|group| {
                let mut invocation = CLAIM.prepare_invoke();
                invocation.arg(IN_FLIGHT_TTL.as_millis() as u64);
                for &i in group {
                    let claim = &claims[i];
                    invocation
                        .key(&keys[i])
                        .key(self.keys.idempotency_claim(claim.token))
                        .arg(in_flight(claim.fingerprint, claim.taker))
                        .arg(&ids[i])
                        .arg(
                            claim
                                .recreate_until
                                .map_or(String::new(), |at| at.timestamp_millis().to_string()),
                        )
                        .arg(issued(claim.taker));
                }
                invocation
            })
            .collect();
        let claim = || {
            let conn = self.redis.clone();
            let (groups, invocations) = (&groups, &invocations);
            async move {
                let answers = try_join_all(invocations.iter().map(|invocation| {
                    let mut conn = conn.clone();
                    async move { invocation.invoke_async::<Vec<String>>(&mut conn).await }
                }))
                .await?;
                Ok(in_key_order(groups, answers, claims.len()))
            }
        };
        match self.health.call(claim).await {
            Ok(states) => Ok(states.iter().map(|state| parse_state(state)).collect()),
            Err(error) => {
                if matches!(error, RedisCallError::Failed(_)) {
                    let at = Instant::now();
                    let abandoned = claims.iter().zip(ids).map(|(c, id)| Abandoned {
                        claim: Giving {
                            token: *c.token,
                            in_flight: in_flight(c.fingerprint, c.taker),
                            id,
                            taker: c.taker,
                        },
                        at,
                    });
                    self.abandoned().extend(abandoned);
                }
                Err(error)
            }
        }
    }
}

/// The answers of per-group calls put back in the order of the keys the groups index.
pub(super) fn in_key_order<T: Default>(
    groups: &[Vec<usize>],
    answers: Vec<Vec<T>>,
    len: usize,
) -> Vec<T> {
    let mut ordered: Vec<T> = std::iter::repeat_with(T::default).take(len).collect();
    for (group, answers) in groups.iter().zip(answers) {
        for (&i, answer) in group.iter().zip(answers) {
            ordered[i] = answer;
        }
    }
    ordered
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
