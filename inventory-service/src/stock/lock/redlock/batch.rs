//! [`Redlock::try_acquire_many`]: a batch's locks in one round, each key the batch's when a
//! majority of the masters gave it, the others freed everywhere and reported busy.

use std::time::Instant;

use shared::ids::ProductId;
use uuid::Uuid;

use super::fanout::Round;
use super::held::RedlockHeld;
use super::{Locks, Partial, Redlock, scripts};

impl Redlock {
    /// Takes, in one round, every product of `products` a majority of the masters can give;
    /// frees the others everywhere and reports them busy.
    pub async fn try_acquire_many(&self, products: &[ProductId]) -> Partial {
        let keys = self.keys_of(products);
        let token = Uuid::new_v4().to_string();
        let ttl = self.inner.options.ttl;
        let started = Instant::now();
        let quorum = self.quorum();
        let count = keys.len();
        // Freed everywhere if this future is dropped before the keys are sorted out.
        let mut round = Round {
            lock: self,
            keys: &keys,
            token: &token,
            armed: true,
        };
        // Done once every key is decided: taken by a majority, or past reaching one.
        let answers = self
            .ask(
                |mut conn, keys, token| async move {
                    scripts::take_each(&mut conn, &keys, &token, ttl).await
                },
                &keys,
                &token,
                |answers: &[redis::RedisResult<Vec<bool>>], pending| {
                    // Whether a majority answers at all must be known too: fewer bypass.
                    let ok = answers.iter().filter(|a| a.is_ok()).count();
                    (ok >= quorum || ok + pending < quorum)
                        && (0..count).all(|i| {
                            let votes = answers
                                .iter()
                                .filter(|a| matches!(a, Ok(taken) if taken.get(i) == Some(&true)))
                                .count();
                            votes >= quorum || votes + pending < quorum
                        })
                },
            )
            .await;
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        if answered < quorum {
            drop(round);
            return Partial {
                locks: self.bypass(&answers),
                busy: Vec::new(),
            };
        }
        let votes = |i: usize| {
            answers
                .iter()
                .filter(|a| matches!(a, Ok(taken) if taken.get(i) == Some(&true)))
                .count()
        };
        let until = self.valid_until(started);
        let (mut held, mut freed, mut busy) = (Vec::new(), Vec::new(), Vec::new());
        let mut ids = products.to_vec();
        ids.sort_unstable();
        ids.dedup();
        round.armed = false;
        drop(round);
        for (i, (key, id)) in keys.into_iter().zip(ids).enumerate() {
            if until.is_some() && votes(i) >= self.quorum() {
                held.push(key);
            } else {
                freed.push(key);
                busy.push(id);
            }
        }
        self.release_everywhere(&freed, &token);
        let locks = match until {
            Some(until) if !held.is_empty() => self.held(held, token, until, started),
            _ => Locks::new(RedlockHeld::nothing()),
        };
        Partial { locks, busy }
    }
}
