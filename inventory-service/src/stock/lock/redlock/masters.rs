//! Whether a majority of the Redlock masters answers, for `/readyz`: a background check pings
//! every master each [`CHECK_EVERY`] and keeps the answer. A batch's own calls cannot tell,
//! since none is sent while nothing is deducted, and readiness must come back by itself once
//! the masters do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use futures_util::future::join_all;
use platform::storage::redis::RedisConnection;
use platform::storage::redis::health::CHECK_EVERY;

/// The masters' answers as the last check saw them. Starts as answering, so an instance is
/// ready until a check says otherwise.
#[derive(Debug)]
pub(super) struct Majority {
    answers: AtomicBool,
}

impl Default for Majority {
    fn default() -> Self {
        Self {
            answers: AtomicBool::new(true),
        }
    }
}

impl Majority {
    pub(super) fn answers(&self) -> bool {
        self.answers.load(Ordering::Relaxed)
    }

    /// Pings `masters` now and every [`CHECK_EVERY`] while `majority` is alive (the lock
    /// holding it dropped, the task ends); each ping is bounded by its connection's timeout.
    pub(super) fn watch(majority: &Arc<Self>, masters: Vec<RedisConnection>, quorum: usize) {
        // Outside a runtime (a lock built for a unit test) nothing watches: it stays answering.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let majority: Weak<Self> = Arc::downgrade(majority);
        runtime.spawn(async move {
            loop {
                let answered = join_all(masters.iter().map(|master| {
                    let mut master = master.clone();
                    async move { master.ping().await.is_ok() }
                }))
                .await
                .into_iter()
                .filter(|answered| *answered)
                .count();
                let Some(majority) = majority.upgrade() else {
                    return;
                };
                let answers = answered >= quorum;
                if majority.answers.swap(answers, Ordering::Relaxed) != answers {
                    tracing::info!(
                        answered,
                        quorum,
                        "the Redlock masters' majority {}",
                        if answers { "answers again" } else { "is lost" }
                    );
                }
                drop(majority);
                tokio::time::sleep(CHECK_EVERY).await;
            }
        });
    }
}
