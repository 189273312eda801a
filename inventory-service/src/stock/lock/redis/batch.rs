//! [`RedisLock::try_acquire_many`]: the locks of a batch's products in one Redis round trip,
//! without waiting for the busy ones.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use platform::storage::redis::health::RedisCallError;
use redis::Script;
use shared::ids::ProductId;

use super::lease::{Lease, release_all, release_in_background};
use super::{Locks, Partial, RedisLock, RedisLocks, sorted_unique};

/// `SET KEYS[i] ARGV[i + 1] NX PX ARGV[1]` for every key, in the order given (ascending
/// product id); one 1 or 0 per key. A key that already holds its lease's token counts as
/// taken: a call run again after its connection broke finds what its first run set.
static TRY_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local taken = {}
        for i, key in ipairs(KEYS) do
            if redis.call('SET', key, ARGV[i + 1], 'NX', 'PX', ARGV[1])
                or redis.call('GET', key) == ARGV[i + 1] then
                taken[i] = 1
            else
                taken[i] = 0
            end
        end
        return taken
        ",
    )
});

/// How long a batch waits in this process's queue for a product's turn. Direct deductions
/// of a hot product come in batches, one after another, each taking the product's turn; a
/// batch of order events that only tried the turn would find it taken for as long as the
/// stream lasts. Waiting in the same FIFO gets it the turn after the batch in hand: a few
/// milliseconds.
pub const TURN_WAIT: Duration = Duration::from_millis(50);

impl RedisLock {
    /// Takes every free lock among `products` (duplicates ignored) in one Redis round trip,
    /// ascending ids, and reports the busy ones instead of waiting for them: a batch goes on
    /// with what it could lock. A product another task of this process holds is waited for
    /// in the local queue for [`TURN_WAIT`] at most, then busy too. When Redis fails, the
    /// locks are bypassed as in [`RedisLock::acquire_all`].
    pub async fn try_acquire_many(&self, products: &[ProductId]) -> Partial {
        let inner = &self.inner;
        let started = Instant::now();
        let ttl = inner.options.ttl;
        let mut busy = Vec::new();
        let mut ids = Vec::new();
        let mut turns = Vec::new();
        // Ascending ids, as every task of this process enters, so none waits on another in a
        // cycle; and each for a moment at most, so one busy product holds the batch back by
        // [`TURN_WAIT`] and no more.
        let deadline = started + TURN_WAIT;
        for id in sorted_unique(products) {
            match inner.local.enter(&[id], deadline).await {
                Some(mut turn) => {
                    ids.push(id);
                    turns.append(&mut turn);
                }
                None => busy.push(id),
            }
        }
        let mut conn = inner.redis.clone();
        if inner.health.is_down() {
            for turn in &mut turns {
                drop(turn.take_kept());
            }
            let locks = Locks::new(self.bypass(&RedisCallError::Down).with_turns(turns));
            return Partial { locks, busy };
        }
        // A key the previous local holder left is used as it is, as in `acquire_all`.
        let mut leases: Vec<Option<(Lease, Instant)>> = Vec::with_capacity(ids.len());
        for turn in &mut turns {
            let kept = turn.take_kept().and_then(|kept| {
                let fit = kept.usable(ttl);
                kept.take().map(|taken| (taken, fit))
            });
            leases.push(match kept {
                Some((taken, true)) => Some(taken),
                Some(((stale, _), false)) => {
                    release_all(&mut conn, &[stale]).await;
                    None
                }
                None => None,
            });
        }
        let wanted: Vec<Lease> = ids
            .iter()
            .zip(&leases)
            .filter(|(_, kept)| kept.is_none())
            .map(|(id, _)| Lease::new(inner.keys.product_lock(*id)))
            .collect();
        let sent_at = Instant::now();
        let try_once = || {
            let mut conn = conn.clone();
            let wanted = &wanted;
            async move { try_many(&mut conn, wanted, ttl).await }
        };
        let taken = match inner.health.call(try_once).await {
            Ok(taken) => taken,
            Err(error) => {
                // Some SETs may have landed; free every key this try could have set.
                let mut all = wanted;
                all.extend(leases.into_iter().flatten().map(|(lease, _)| lease));
                release_in_background(&conn, all);
                return Partial {
                    locks: Locks::new(self.bypass(&error).with_turns(turns)),
                    busy,
                };
            }
        };
        let mut fresh = wanted.into_iter().zip(taken);
        let mut held = Vec::new();
        let mut held_turns = Vec::new();
        let mut valid_until = started + ttl;
        for ((id, kept), turn) in ids.into_iter().zip(leases).zip(turns) {
            let lease = match kept {
                Some((lease, until)) => {
                    valid_until = valid_until.min(until);
                    lease
                }
                None => match fresh.next() {
                    Some((lease, true)) => {
                        valid_until = valid_until.min(sent_at + ttl);
                        lease
                    }
                    _ => {
                        // Its turn passes on as it drops.
                        busy.push(id);
                        continue;
                    }
                },
            };
            held.push(lease);
            held_turns.push(turn);
        }
        busy.sort_unstable();
        if inner.redis_down.swap(false, Ordering::Relaxed) {
            tracing::info!("Redis is reachable again: stock deductions take their locks again");
        }
        if !held.is_empty() {
            inner.counters.acquired(started.elapsed());
        }
        let locks = Locks::new(
            RedisLocks::held(conn, held, valid_until, inner.options, inner.health.clone())
                .with_turns(held_turns),
        );
        Partial { locks, busy }
    }
}

/// Runs [`TRY_MANY`] for `leases`: one call on one Redis; one per slot on a Redis Cluster,
/// all sent at once. Each key is tried alone, so the cut changes no answer: a busy key never
/// makes another one busy.
async fn try_many(
    conn: &mut platform::storage::redis::RedisConnection,
    leases: &[Lease],
    ttl: Duration,
) -> redis::RedisResult<Vec<bool>> {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let keys: Vec<&str> = leases.iter().map(Lease::key).collect();
    let groups = conn.slot_groups(&keys);
    let tries = groups.iter().map(|group| {
        let mut conn = conn.clone();
        let mut invocation = TRY_MANY.prepare_invoke();
        invocation.arg(ttl_ms);
        for &i in group {
            invocation.key(leases[i].key()).arg(leases[i].token());
        }
        async move { invocation.invoke_async::<Vec<i64>>(&mut conn).await }
    });
    let answers = futures_util::future::try_join_all(tries).await?;
    let mut taken = vec![false; leases.len()];
    for (group, answer) in groups.iter().zip(answers) {
        for (&i, t) in group.iter().zip(answer) {
            taken[i] = t == 1;
        }
    }
    Ok(taken)
}
