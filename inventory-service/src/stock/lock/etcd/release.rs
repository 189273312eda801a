//! Freeing etcd keys: each deleted only while it holds its holder's token, and an acquisition
//! that ends without handing its locks over ([`Attempt`]) frees every key it may have taken.

use etcd_client::{Txn, TxnOp};

use super::{EtcdLock, MAX_KEYS_PER_NESTED_TXN, txn};

impl EtcdLock {
    /// Deletes each of `taken` that still holds `token`: one transaction per chunk, of one
    /// nested transaction per key, so a key lost to another holder stays theirs. Then the
    /// token is no longer wanted: a key it still holds (a failed delete, a late commit) is the
    /// sweep's.
    pub(super) async fn release(&self, taken: &[(String, i64)], token: &str) {
        for chunk in taken.chunks(MAX_KEYS_PER_NESTED_TXN) {
            let each: Vec<TxnOp> = chunk
                .iter()
                .map(|(key, _)| TxnOp::txn(txn::delete_if(key.as_bytes(), token.as_bytes())))
                .collect();
            if let Err(error) = self.call(Txn::new().and_then(each)).await {
                tracing::debug!(%error, "could not free etcd stock locks; the sweep will");
            }
        }
        self.inner.tokens.end(token);
    }

    pub(super) fn release_in_background(&self, taken: &[(String, i64)], token: &str) {
        if taken.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            self.inner.tokens.end(token);
            return;
        }
        let (lock, taken, token) = (self.clone(), taken.to_vec(), token.to_owned());
        tokio::spawn(async move { lock.release(&taken, &token).await });
    }
}

/// An acquisition under way: until disarmed, dropping it frees every one of its keys that
/// holds its token, in the background.
pub(super) struct Attempt<'a> {
    lock: &'a EtcdLock,
    keys: &'a [String],
    token: &'a str,
    armed: bool,
}

impl<'a> Attempt<'a> {
    pub(super) fn new(lock: &'a EtcdLock, keys: &'a [String], token: &'a str) -> Self {
        Self {
            lock,
            keys,
            token,
            armed: true,
        }
    }

    /// The acquisition's keys are handed over (or none of its tries can have taken any).
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.armed {
            let keys: Vec<(String, i64)> = self.keys.iter().map(|key| (key.clone(), 0)).collect();
            self.lock.release_in_background(&keys, self.token);
        }
    }
}
