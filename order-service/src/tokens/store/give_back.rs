//! Giving claimed tokens back: after a failure that created nothing, and for claims whose
//! call failed without an answer, once Redis answers again.

use std::sync::{MutexGuard, PoisonError};
use std::time::Instant;

use futures_util::future::try_join_all;
use platform::storage::redis::health::{CHECK_EVERY, RedisCallError};
use shared::ids::UserId;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Held, IN_FLIGHT_TTL, TokenStore};
use crate::tokens::scripts::RELEASE;
use crate::tokens::state::{in_flight, issued};

/// A claim whose call failed after it was sent: Redis may have run it, or run it later.
/// Given back by its claim id, so only this very claim.
pub(super) struct Abandoned {
    pub(super) claim: Giving,
    pub(super) at: Instant,
}

/// A token to give back: held by `in_flight` (under claim `id` when not empty).
pub(super) struct Giving {
    pub(super) token: Uuid,
    pub(super) in_flight: String,
    pub(super) id: String,
    pub(super) taker: Option<UserId>,
}

impl TokenStore {
    /// Gives tokens back (`issued` to their takers, until their own expiry) after a failure
    /// that created nothing, so their clients can retry with them; each only if its request
    /// still holds it. One round trip.
    pub async fn release_all(&self, held: &[Held<'_>]) -> Result<(), RedisCallError> {
        let held: Vec<_> = held
            .iter()
            .map(|h| Giving {
                token: *h.token,
                in_flight: in_flight(h.fingerprint, h.taker),
                id: String::new(),
                taker: h.taker,
            })
            .collect();
        self.give_back(&held.iter().collect::<Vec<_>>()).await
    }

    /// Gives back the claims that failed without an answer, if Redis answers now; those
    /// older than [`IN_FLIGHT_TTL`] are stale anyway and are forgotten.
    pub(super) async fn release_abandoned(&self) {
        if self.health.is_down() {
            return;
        }
        let mut abandoned: Vec<Abandoned> = std::mem::take(&mut *self.abandoned());
        abandoned.retain(|a| a.at.elapsed() < IN_FLIGHT_TTL);
        if abandoned.is_empty() {
            return;
        }
        let held: Vec<&Giving> = abandoned.iter().map(|a| &a.claim).collect();
        match self.give_back(&held).await {
            Ok(()) => tracing::info!(
                claims = held.len(),
                "gave back the token claims of requests whose Redis call failed"
            ),
            Err(_) => self.abandoned().extend(abandoned),
        }
    }

    /// Gives back, every [`CHECK_EVERY`] until `shutdown`, the claims that failed without an
    /// answer once Redis answers again: a retry sent to another instance finds its token
    /// free within seconds, not after [`IN_FLIGHT_TTL`].
    pub async fn give_back_abandoned(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(CHECK_EVERY) => {}
            }
            self.release_abandoned().await;
        }
    }

    /// Runs [`RELEASE`]: each token still held by its request (by that very claim, when an
    /// id is given) becomes `issued` to its taker again until its own expiry (deleted if that
    /// has passed).
    async fn give_back(&self, held: &[&Giving]) -> Result<(), RedisCallError> {
        if held.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = held
            .iter()
            .map(|giving| self.keys.idempotency_token(&giving.token))
            .collect();
        // As in a claim: one script per slot on a cluster, each token decided alone.
        let invocations: Vec<_> = self
            .redis
            .slot_groups(&keys)
            .into_iter()
            .map(|group| {
                let mut invocation = RELEASE.prepare_invoke();
                for i in group {
                    let giving = held[i];
                    let expires = self
                        .signer
                        .expiry(&giving.token, giving.taker)
                        .map_or(String::new(), |at| at.timestamp_millis().to_string());
                    invocation
                        .key(&keys[i])
                        .key(self.keys.idempotency_claim(&giving.token))
                        .arg(&giving.in_flight)
                        .arg(&giving.id)
                        .arg(issued(giving.taker))
                        .arg(expires);
                }
                invocation
            })
            .collect();
        let release = || {
            let conn = self.redis.clone();
            let invocations = &invocations;
            async move {
                try_join_all(invocations.iter().map(|invocation| {
                    let mut conn = conn.clone();
                    async move { invocation.invoke_async::<i64>(&mut conn).await }
                }))
                .await
            }
        };
        self.health.call(release).await.map(drop)
    }

    pub(super) fn abandoned(&self) -> MutexGuard<'_, Vec<Abandoned>> {
        // Nothing panics while holding the lock; the list stays usable if something did.
        self.abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
