//! [`EtcdLock::try_acquire_many`]: a batch's free keys taken without waiting, one nested
//! transaction per key, the busy ones reported.

use std::time::Instant;

use etcd_client::{Txn, TxnOp, TxnOpResponse};
use shared::ids::ProductId;
use uuid::Uuid;

use super::held::EtcdHeld;
use super::release::Attempt;
use super::txn::{take, taken_whole};
use super::{EtcdLock, Locks, MAX_KEYS_PER_NESTED_TXN, Partial};

impl EtcdLock {
    /// Takes, without waiting, every free product of `products`; reports the busy ones.
    pub async fn try_acquire_many(&self, products: &[ProductId]) -> Partial {
        let ids = Self::ids_of(products);
        let keys: Vec<String> = ids.iter().map(|id| self.key(*id)).collect();
        let token = Uuid::new_v4().to_string();
        let started = Instant::now();
        let Some(epoch) = self.inner.lease.current() else {
            return Partial {
                locks: self.bypass(None),
                busy: Vec::new(),
            };
        };
        self.inner.tokens.begin(&token);
        let attempt_guard = Attempt::new(self, &keys, &token);
        let (mut taken, mut busy) = (Vec::new(), Vec::new());
        for (chunk, chunk_ids) in keys
            .chunks(MAX_KEYS_PER_NESTED_TXN)
            .zip(ids.chunks(MAX_KEYS_PER_NESTED_TXN))
        {
            let each: Vec<TxnOp> = chunk
                .iter()
                .map(|key| TxnOp::txn(take(std::slice::from_ref(key), &token, epoch.id)))
                .collect();
            let answer = match self.call(Txn::new().and_then(each)).await {
                Ok(answer) => answer,
                Err(error) => {
                    return Partial {
                        locks: self.bypass(Some(error)),
                        busy: Vec::new(),
                    };
                }
            };
            let revision = answer.header().map_or(0, |h| h.revision());
            for ((key, id), nested) in chunk.iter().zip(chunk_ids).zip(answer.op_responses()) {
                let mine = match &nested {
                    TxnOpResponse::Txn(one) if one.succeeded() => Some(revision),
                    TxnOpResponse::Txn(one) => {
                        taken_whole(one, &token).and_then(|r| r.first().copied())
                    }
                    _ => None,
                };
                match mine {
                    Some(revision) => taken.push((key.clone(), revision)),
                    None => busy.push(*id),
                }
            }
        }
        attempt_guard.disarm();
        let locks = if taken.is_empty() {
            // Nothing to free; a late commit of a busy key's try is the sweep's.
            self.inner.tokens.end(&token);
            Locks::new(EtcdHeld::nothing())
        } else {
            self.held(taken, token, epoch, started)
        };
        Partial { locks, busy }
    }
}
