//! In-process queues in front of the Redis locks.
//!
//! Tasks of one process that want the same product wait in a FIFO (a fair async mutex per
//! product) instead of all polling Redis with backoff: the lock then passes from one local
//! holder to the next as soon as it is released, with no backoff gap, and Redis only
//! arbitrates between processes. On a hot product this is the difference between a few
//! hundred and a few thousand lock hand-overs a second.
//!
//! A holder that leaves while others of this process queue for the product may also leave
//! its Redis key to the next one ([`Turn::hand_over`]) instead of deleting it for the next to
//! set again: two Redis round trips fewer per holder, on the path where every holder waits
//! for the one before. A hand-over keeps the key only while it is young (see [`Kept::usable`])
//! and at most [`MAX_HAND_OVERS`] times in a row, so the key is regularly deleted and set
//! again, which is when another process can take it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use platform::storage::redis::RedisConnection;
use shared::ids::ProductId;
use tokio::sync::OwnedMutexGuard;

use super::lease::{Lease, release_all};

/// Hand-overs in a row before the key is deleted and taken again through Redis.
pub const MAX_HAND_OVERS: u32 = 32;

/// A Redis key one local holder left for the next.
#[derive(Debug)]
pub struct Kept {
    /// `None` once taken over; otherwise deleted in the background when dropped.
    lease: Option<Lease>,
    conn: RedisConnection,
    /// Until when the key is known to be ours.
    valid_until: Instant,
}

impl Kept {
    /// Young enough to need no renewal before a holder is done with it (a renewal runs a
    /// third of the TTL after acquisition), and not passed on too often in a row.
    pub fn usable(&self, ttl: Duration) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| lease.hand_overs() < MAX_HAND_OVERS)
            && self.valid_until.saturating_duration_since(Instant::now()) > ttl * 2 / 3
    }

    /// The lease and until when it is valid.
    pub fn take(mut self) -> Option<(Lease, Instant)> {
        self.lease.take().map(|lease| (lease, self.valid_until))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // Nobody took it (the waiters gave up): free the key rather than let it block other
        // processes until it expires.
        let (Some(lease), Ok(runtime)) = (self.lease.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let mut conn = self.conn.clone();
        runtime.spawn(async move { release_all(&mut conn, &[lease]).await });
    }
}

#[derive(Debug, Default)]
struct Queue {
    /// Tasks waiting for their turn, so a leaving holder knows whether anyone follows.
    waiting: AtomicUsize,
    turn: Arc<tokio::sync::Mutex<Option<Kept>>>,
}

/// One queue per product, created on demand and forgotten once nobody waits on it.
#[derive(Debug, Default)]
pub struct LocalQueues {
    queues: Mutex<HashMap<ProductId, Weak<Queue>>>,
}

/// This process's turn on one product; the turn passes on when it is dropped.
#[derive(Debug)]
pub struct Turn {
    queue: Arc<Queue>,
    guard: OwnedMutexGuard<Option<Kept>>,
}

/// This process's turns on some products, in ascending product id.
pub type Turns = Vec<Turn>;

impl Turn {
    /// The key the previous holder left, if any.
    pub fn take_kept(&mut self) -> Option<Kept> {
        self.guard.take()
    }

    /// Leaves `lease` (valid until `valid_until`) to the next local holder if one is waiting
    /// and the key is fit for it. Gives the lease back when it should be deleted instead.
    pub fn hand_over(
        &mut self,
        lease: Lease,
        conn: &RedisConnection,
        valid_until: Instant,
        ttl: Duration,
    ) -> Option<Lease> {
        let kept = Kept {
            lease: Some(lease.handed_over()),
            conn: conn.clone(),
            valid_until,
        };
        if self.queue.waiting.load(Ordering::SeqCst) > 0 && kept.usable(ttl) {
            *self.guard = Some(kept);
            None
        } else {
            kept.take().map(|(lease, ..)| lease)
        }
    }
}

impl LocalQueues {
    /// Waits for this process's turn on every product of `sorted_ids` (ascending, so two
    /// tasks never wait on each other in a cycle); `None` when `deadline` passes first.
    pub async fn enter(&self, sorted_ids: &[ProductId], deadline: Instant) -> Option<Turns> {
        let mut turns = Vec::with_capacity(sorted_ids.len());
        for id in sorted_ids {
            let queue = self.queue(*id);
            queue.waiting.fetch_add(1, Ordering::SeqCst);
            let turn =
                tokio::time::timeout_at(deadline.into(), queue.turn.clone().lock_owned()).await;
            queue.waiting.fetch_sub(1, Ordering::SeqCst);
            turns.push(Turn {
                guard: turn.ok()?,
                queue,
            });
        }
        Some(turns)
    }

    fn queue(&self, id: ProductId) -> Arc<Queue> {
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
        let queue = Arc::new(Queue::default());
        queues.insert(id, Arc::downgrade(&queue));
        queue
    }
}

#[cfg(test)]
mod tests {
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
        assert!(
            queues
                .enter(&[ProductId(4)], Instant::now())
                .await
                .is_some(),
            "a free product's turn is taken even at the deadline"
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
