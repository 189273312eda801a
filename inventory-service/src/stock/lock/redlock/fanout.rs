//! Talking to every master at once: a question sent to all of them whose answers are
//! collected until a majority decides it, and keys freed everywhere, in the background, so a
//! slow or lost master holds nobody up.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use platform::storage::redis::RedisConnection;
use tokio::task::JoinHandle;

use super::{Redlock, scripts};

impl Redlock {
    /// Asks every master at once with `call` and collects the answers as they come, until
    /// `done(answers, still pending)` or every master answered (or timed out, after
    /// `REDIS_TIMEOUT_MS`). A call left pending may still run on its master: whatever it set
    /// holds the caller's token, and is freed with the rest.
    pub(super) async fn ask<T, F, Fut>(
        &self,
        call: F,
        keys: &[String],
        token: &str,
        done: impl Fn(&[redis::RedisResult<T>], usize) -> bool,
    ) -> Vec<redis::RedisResult<T>>
    where
        F: Fn(RedisConnection, Vec<String>, String) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut pending: FuturesUnordered<Fut> = self
            .inner
            .masters
            .iter()
            .map(|master| call(master.clone(), keys.to_vec(), token.to_owned()))
            .collect();
        let mut answers = Vec::with_capacity(pending.len());
        while let Some(answer) = pending.next().await {
            answers.push(answer);
            if done(&answers, pending.len()) {
                break;
            }
        }
        answers
    }

    /// Frees `keys` that hold `token` on every master, in the background: one task per
    /// master, so a slow one holds nobody up, and one that does not answer lets them expire.
    pub(super) fn release_everywhere(&self, keys: &[String], token: &str) -> Vec<JoinHandle<bool>> {
        if keys.is_empty() {
            return Vec::new();
        }
        self.inner
            .masters
            .iter()
            .map(|master| {
                let (mut conn, keys, token) = (master.clone(), keys.to_vec(), token.to_owned());
                tokio::spawn(async move {
                    let released = scripts::release_all(&mut conn, &keys, &token).await;
                    if let Err(error) = &released {
                        tracing::debug!(%error, "could not free a Redlock key; it expires");
                    }
                    released.is_ok()
                })
            })
            .collect()
    }

    /// [`Redlock::release_everywhere`], returning once a majority of the masters freed the
    /// keys (or every master answered).
    pub(super) async fn release_on_majority(&self, keys: &[String], token: &str) {
        let quorum = self.quorum();
        let mut tasks: FuturesUnordered<_> =
            self.release_everywhere(keys, token).into_iter().collect();
        let mut freed = 0;
        while let Some(done) = tasks.next().await {
            freed += usize::from(matches!(done, Ok(true)));
            if freed >= quorum {
                return;
            }
        }
    }
}

/// One round of [`Redlock::acquire_all`]: frees its keys everywhere when dropped while armed
/// (a lost round, or the caller's future dropped mid-round).
pub(super) struct Round<'a> {
    pub(super) lock: &'a Redlock,
    pub(super) keys: &'a [String],
    pub(super) token: &'a str,
    pub(super) armed: bool,
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        if self.armed && tokio::runtime::Handle::try_current().is_ok() {
            self.lock.release_everywhere(self.keys, self.token);
        }
    }
}
