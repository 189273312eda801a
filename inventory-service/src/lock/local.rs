//! In-process queues in front of the Redis locks.
//!
//! Tasks of one process that want the same product wait in a FIFO (a fair async mutex per
//! product) instead of all polling Redis with backoff: the lock then passes from one local
//! holder to the next as soon as it is released, with no backoff gap, and Redis only
//! arbitrates between processes. On a hot product this is the difference between a few
//! hundred and a few thousand lock hand-overs a second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use shared::ids::ProductId;
use tokio::sync::OwnedMutexGuard;

/// One queue per product, created on demand and forgotten once nobody waits on it.
#[derive(Debug, Default)]
pub struct LocalQueues {
    queues: Mutex<HashMap<ProductId, Weak<tokio::sync::Mutex<()>>>>,
}

/// This process's turn on some products; the turn passes on when it is dropped.
pub type Turns = Vec<OwnedMutexGuard<()>>;

impl LocalQueues {
    /// Waits for this process's turn on every product of `sorted_ids` (ascending, so two
    /// tasks never wait on each other in a cycle); `None` when `deadline` passes first.
    pub async fn enter(&self, sorted_ids: &[ProductId], deadline: Instant) -> Option<Turns> {
        let mut turns = Vec::with_capacity(sorted_ids.len());
        for id in sorted_ids {
            let queue = self.queue(*id);
            let turn = tokio::time::timeout_at(deadline.into(), queue.lock_owned())
                .await
                .ok()?;
            turns.push(turn);
        }
        Some(turns)
    }

    fn queue(&self, id: ProductId) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(queue) = queues.get(&id).and_then(Weak::upgrade) {
            return queue;
        }
        // Forget queues nobody holds any more before the map grows.
        if queues.len() >= 1024 {
            queues.retain(|_, queue| queue.strong_count() > 0);
        }
        let queue = Arc::new(tokio::sync::Mutex::new(()));
        queues.insert(id, Arc::downgrade(&queue));
        queue
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_second_task_waits_for_the_first_and_times_out_at_its_deadline() {
        let queues = LocalQueues::default();
        let far = Instant::now() + Duration::from_secs(5);
        let first = queues.enter(&[ProductId(1), ProductId(2)], far).await;
        assert!(first.is_some());
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(queues.enter(&[ProductId(2)], soon).await.is_none());
        assert!(
            queues.enter(&[ProductId(3)], soon).await.is_some(),
            "other products are free"
        );
        drop(first);
        assert!(
            queues
                .enter(&[ProductId(1), ProductId(2)], far)
                .await
                .is_some()
        );
    }
}
