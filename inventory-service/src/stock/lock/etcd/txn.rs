//! The transactions the etcd lock sends: take keys if free (reading them back otherwise), and
//! delete a key only while it holds a given token.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};

/// Puts every key of `keys` under `lease` with `token` if none of them exists; reads them
/// otherwise, so that [`taken_whole`] can tell keys of ours (a try that committed although its
/// answer was lost) from another holder's.
pub(super) fn take(keys: &[String], token: &str, lease: i64) -> Txn {
    let free: Vec<Compare> = keys
        .iter()
        .map(|key| Compare::create_revision(key.as_str(), CompareOp::Equal, 0))
        .collect();
    let put: Vec<TxnOp> = keys
        .iter()
        .map(|key| {
            TxnOp::put(
                key.as_str(),
                token,
                Some(PutOptions::new().with_lease(lease)),
            )
        })
        .collect();
    let read: Vec<TxnOp> = keys
        .iter()
        .map(|key| TxnOp::get(key.as_str(), None))
        .collect();
    Txn::new().when(free).and_then(put).or_else(read)
}

/// Each key's revision when a [`take`] holds all of its keys for `token`: it put them, or
/// they already held `token` (an earlier try of the same acquisition committed).
pub(super) fn taken_whole(answer: &etcd_client::TxnResponse, token: &str) -> Option<Vec<i64>> {
    let responses = answer.op_responses();
    if answer.succeeded() {
        let revision = answer.header().map_or(0, |h| h.revision());
        return Some(vec![revision; responses.len()]);
    }
    responses
        .iter()
        .map(|response| match response {
            TxnOpResponse::Get(read) => read
                .kvs()
                .first()
                .filter(|kv| kv.value() == token.as_bytes())
                .map(|kv| kv.mod_revision()),
            _ => None,
        })
        .collect()
}

/// Deletes `key` only while it holds `token`: a key lost to another holder stays theirs.
pub(super) fn delete_if(key: &[u8], token: &[u8]) -> Txn {
    Txn::new()
        .when([Compare::value(key, CompareOp::Equal, token)])
        .and_then([TxnOp::delete(key, None)])
}
