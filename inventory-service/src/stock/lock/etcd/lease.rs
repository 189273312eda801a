//! The instance's one etcd lease. It is granted with `LOCK_TTL_MS` rounded up to whole seconds
//! (etcd's unit; etcd may grant more, never less), kept alive every third of it, and granted
//! afresh once it lapses. Every lock the instance takes is put under the lease current at the
//! time. When the lease lapses (etcd unreachable for a TTL, the process paused), etcd deletes
//! every one of those keys, and here every holder under it counts its locks lost.
//!
//! The keeper is also the lock service's health check: while no live lease is held, etcd
//! counts as down (`/readyz` names it) and acquisitions bypass the lock at once instead of
//! waiting for calls that cannot succeed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::members::Members;
use tokio_util::sync::CancellationToken;

use super::BACKEND;
use crate::metrics;

/// One granted lease, for as long as it lives.
#[derive(Debug)]
pub(super) struct Epoch {
    pub(super) id: i64,
    /// Until when etcd is known to keep the lease: when the last granted keep-alive was sent,
    /// plus the TTL it answered. A conservative bound: etcd counts from when it received it.
    valid_until: Mutex<Instant>,
    /// Cancelled once the lease is known lapsed; every holder's `lost` is a child of it.
    pub(super) lapsed: CancellationToken,
}

impl Epoch {
    fn new(id: i64, until: Instant) -> Self {
        Self {
            id,
            valid_until: Mutex::new(until),
            lapsed: CancellationToken::new(),
        }
    }

    fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn extend(&self, until: Instant) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
    }

    /// `true` while the lease (and every key under it) surely exists.
    pub(super) fn is_live(&self) -> bool {
        !self.lapsed.is_cancelled() && Instant::now() < self.valid_until()
    }
}

/// The current lease, as the keeper publishes it.
#[derive(Debug, Default)]
pub(super) struct Lease {
    current: Mutex<Option<Arc<Epoch>>>,
}

impl Lease {
    /// The lease to put new locks under, when one is live.
    pub(super) fn current(&self) -> Option<Arc<Epoch>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .filter(|epoch| epoch.is_live())
    }

    fn publish(&self, epoch: Option<Arc<Epoch>>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = epoch;
    }
}

/// How the keeper runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keeping {
    /// The TTL asked for.
    pub(super) ttl: Duration,
    /// Bound of every call to etcd.
    pub(super) call_timeout: Duration,
    /// `false`: the lease is granted and left to lapse (a test's stalled holder).
    pub(super) renew: bool,
}

/// Grants the lease, keeps it alive and grants another once it lapsed, until `stop`.
pub(super) async fn keep(
    members: Arc<Members>,
    lease: Arc<Lease>,
    how: Keeping,
    stop: CancellationToken,
) {
    let ttl_secs = i64::try_from(how.ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1);
    let mut attempt = 0;
    loop {
        let sent = Instant::now();
        let granted = tokio::select! {
            () = stop.cancelled() => return,
            granted = members.call(|mut c| async move { c.lease_grant(ttl_secs, None).await }) => granted,
        };
        let epoch = match granted {
            Ok(granted) if granted.ttl() > 0 => {
                attempt = 0;
                Arc::new(Epoch::new(granted.id(), sent + secs(granted.ttl())))
            }
            answer => {
                if attempt == 0 {
                    let error = match answer {
                        Ok(granted) => granted.error().to_owned(),
                        Err(error) => error.to_string(),
                    };
                    tracing::warn!(
                        %error,
                        "no etcd lease: deducting stock without locks until etcd grants one \
                         (the conditional update keeps stock correct)"
                    );
                }
                let pause =
                    platform::retry::backoff(attempt, how.call_timeout / 4, how.call_timeout);
                attempt += 1;
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        };
        tracing::info!(
            lease = epoch.id,
            ttl_secs,
            "etcd lease granted: stock locks are taken under it"
        );
        lease.publish(Some(epoch.clone()));
        tokio::select! {
            () = stop.cancelled() => {
                // Frees this instance's keys at once rather than after the TTL.
                let id = epoch.id;
                let _ = members.call(|mut c| async move { c.lease_revoke(id).await }).await;
                epoch.lapsed.cancel();
                return;
            }
            () = keep_alive(&members, &epoch, how) => {}
        }
        tracing::warn!(
            lease = epoch.id,
            "etcd lease lapsed: every stock lock under it is lost"
        );
        epoch.lapsed.cancel();
        lease.publish(None);
        // Declared lapsed by this side's conservative clock, the lease may live on in etcd for
        // a while: revoke it, so its keys free their products now (best effort, beside the
        // next grant).
        let (members, id) = (members.clone(), epoch.id);
        tokio::spawn(async move {
            let _ = members
                .call(|mut c| async move { c.lease_revoke(id).await })
                .await;
        });
    }
}

/// Keeps `epoch` alive every third of its TTL; returns once it lapsed, or may have.
async fn keep_alive(members: &Members, epoch: &Epoch, how: Keeping) {
    if !how.renew {
        tokio::time::sleep_until(epoch.valid_until().into()).await;
        return;
    }
    let period = how.ttl / 3;
    // Reopened after an error, on the next member that answers.
    loop {
        if !epoch.is_live() {
            return;
        }
        let id = epoch.id;
        let opened = members
            .call(|mut c| async move { c.lease_keep_alive(id).await })
            .await;
        let Ok((mut keeper, mut answers)) = opened else {
            tokio::time::sleep(how.call_timeout / 4).await;
            continue;
        };
        loop {
            let sent = Instant::now();
            let answer = tokio::time::timeout(how.call_timeout, async {
                keeper.keep_alive().await?;
                answers.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(kept))) if kept.ttl() > 0 => {
                    epoch.extend(sent + secs(kept.ttl()));
                    metrics::lock_renewed(BACKEND);
                }
                // TTL 0: etcd no longer has the lease.
                Ok(Ok(Some(_))) => return,
                _ => break,
            }
            tokio::time::sleep(period).await;
        }
    }
}

fn secs(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}
