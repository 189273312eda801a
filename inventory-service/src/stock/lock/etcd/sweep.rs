//! What keeps a key from outliving its holder under a lease that is kept alive: the tokens of
//! the acquisitions under way or held ([`Tokens`]), and a sweep, once a TTL, of the keys under
//! the instance's lease whose token is none of them.
//!
//! A key can be left behind two ways. A release can fail (etcd unreachable for less than the
//! lease's TTL, an election), and nothing would retry it. And a `take` whose answer timed out
//! can still commit after its acquisition moved on: after the key was reported busy, or after
//! the acquisition's own clean-up ran. Under the kept-alive lease either would keep the
//! product busy for every instance until this process stopped. A token is dropped from the
//! set once its release was attempted, whatever came of it; from then on any key still
//! holding it is the sweep's.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::LeaseTimeToLiveOptions;
use tokio_util::sync::CancellationToken;

use super::lease::Lease;
use super::members::Members;

/// The tokens whose keys are wanted: acquisitions under way, and locks held.
#[derive(Debug, Default)]
pub(super) struct Tokens(Mutex<HashSet<String>>);

impl Tokens {
    pub(super) fn begin(&self, token: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_owned());
    }

    pub(super) fn end(&self, token: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token);
    }

    fn is_live(&self, token: &[u8]) -> bool {
        std::str::from_utf8(token).is_ok_and(|token| {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(token)
        })
    }
}

/// Every `period`, deletes the keys under the current lease whose token is not live (each only
/// while it still holds that token), until `stop`.
pub(super) async fn sweep(
    members: Arc<Members>,
    lease: Arc<Lease>,
    tokens: Arc<Tokens>,
    period: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let Some(epoch) = lease.current() else {
            continue;
        };
        let id = epoch.id;
        let Ok(under) = members
            .call(|mut c| async move {
                c.lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys()))
                    .await
            })
            .await
        else {
            continue;
        };
        for key in under.keys() {
            let key = key.clone();
            let read = {
                let key = key.clone();
                members
                    .call(|mut c| {
                        let key = key.clone();
                        async move { c.get(key, None).await }
                    })
                    .await
            };
            let Some(value) = read
                .ok()
                .and_then(|read| read.kvs().first().map(|kv| kv.value().to_vec()))
            else {
                continue;
            };
            if tokens.is_live(&value) {
                continue;
            }
            let delete = super::txn::delete_if(&key, &value);
            let deleted = members
                .call(|mut c| {
                    let delete = delete.clone();
                    async move { c.txn(delete).await }
                })
                .await;
            if deleted.is_ok_and(|answer| answer.succeeded()) {
                tracing::info!(
                    key = %String::from_utf8_lossy(&key),
                    "freed an etcd stock lock its holder had left behind"
                );
            }
        }
    }
}
