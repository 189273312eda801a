//! [`RowLock`]: the stock lock without a lock service (`STOCK_LOCK=database`). Every write
//! that changes stock already locks its products' rows in ascending product id inside its own
//! transaction, and waits there for another writer of the same rows: on PostgreSQL the batch's
//! one statement (`ordered … FOR UPDATE` before its update), on MySQL the attempt's read
//! (`FOR UPDATE`, `deductions::queries::AttemptTx`); the order-events consumer reads its
//! products `FOR UPDATE SKIP LOCKED`, leaving one another writer holds for its next batch, and
//! writes under those locks. Those row locks are this lock. Taking it costs nothing and it cannot be lost: it lives exactly as long as
//! the transaction that needs it, so no holder can outlive it, and no pause of a holder can
//! let another writer in before its commit.
//!
//! What it gives up against a lock service: writers of a hot product from several instances
//! meet at the row instead of queueing in Redis, so a batch judged on a snapshot that another
//! instance then changes fails its version check and is judged again (PostgreSQL), or waits
//! for the row before it reads (MySQL). Stock stays correct either way: the conditional
//! update decides. Within one instance, batches of one product set already run one after
//! another (`deductions::queue`).

use futures_util::future::BoxFuture;
use shared::ids::ProductId;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Counters, Held, LockError, LockOptions, LockStats, Locks, Partial, StockLock};

/// The `backend` label of this lock's metrics, and `STOCK_LOCK`'s value for it.
pub const BACKEND: &str = "database";

/// The stock lock the database's row locks are. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RowLock {
    options: LockOptions,
    counters: Arc<Counters>,
}

impl RowLock {
    pub fn new(options: LockOptions) -> Self {
        Self {
            options,
            counters: Arc::new(Counters::new(BACKEND)),
        }
    }

    fn take(&self, products: &[ProductId]) -> Locks {
        let started = Instant::now();
        let mut ids = products.to_vec();
        ids.sort_unstable();
        ids.dedup();
        self.counters.acquired(started.elapsed());
        Locks::new(Rows {
            keys: ids.iter().map(|id| format!("product:{id}")).collect(),
            lost: CancellationToken::new(),
        })
    }
}

impl StockLock for RowLock {
    fn acquire_all<'a>(
        &'a self,
        products: &'a [ProductId],
    ) -> BoxFuture<'a, Result<Locks, LockError>> {
        Box::pin(async move { Ok(self.take(products)) })
    }

    fn try_acquire_many<'a>(&'a self, products: &'a [ProductId]) -> BoxFuture<'a, Partial> {
        Box::pin(async move {
            Partial {
                locks: self.take(products),
                busy: Vec::new(),
            }
        })
    }

    fn options(&self) -> LockOptions {
        self.options
    }

    fn stats(&self) -> LockStats {
        self.counters.stats()
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }
}

/// The products whose rows the holder's write will lock: a name for each, for logs; nothing is
/// held outside the database, so there is nothing to lose, renew or release.
struct Rows {
    keys: Vec<String>,
    /// Never cancelled.
    lost: CancellationToken,
}

impl Held for Rows {
    fn is_bypassed(&self) -> bool {
        false
    }

    fn keys(&self) -> Vec<&str> {
        self.keys.iter().map(String::as_str).collect()
    }

    fn tokens(&self) -> Vec<&str> {
        Vec::new()
    }

    fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    fn ensure_held(&self) -> Result<(), LockError> {
        Ok(())
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}
