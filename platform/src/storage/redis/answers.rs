//! The connection as redis-rs sees it: each command goes to the current primary, and an
//! answer that says the node is no primary any more sends the connection looking for the
//! one that is. On a cluster, to redis-rs's cluster connection, which does all of that per
//! slot.

use redis::aio::ConnectionLike;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Arg, Cmd, Pipeline, RedisError, RedisFuture, Value};

use super::RedisConnection;

/// Whether `error` says the node is no primary now: it did not answer (dead, or cut off),
/// or it answered as a replica (`READONLY`: demoted by a failover; `MASTERDOWN`: a replica
/// that lost its own primary).
pub(super) fn primary_lost(error: &RedisError) -> bool {
    crate::storage::redis::health::is_unreachable(error) || demoted_code(error.code())
}

fn demoted_code(code: Option<&str>) -> bool {
    matches!(code, Some("READONLY" | "MASTERDOWN"))
}

fn is_script_load(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes.to_ascii_uppercase(),
        _ => Vec::new(),
    });
    args.next().as_deref() == Some(b"SCRIPT") && args.next().as_deref() == Some(b"LOAD")
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if let Some(cluster) = &self.inner.cluster {
                let mut cluster = cluster.clone();
                if is_script_load(cmd) {
                    // redis-rs loads a script on every node and wants every one to answer; a
                    // node lost in a failover would fail the load, and so the call, although
                    // the node that runs the script answered. Any answer will do: the script
                    // runs on its key's master, and a failed node is out of the layout by then.
                    let everywhere = RoutingInfo::MultiNode((
                        MultipleNodeRoutingInfo::AllNodes,
                        Some(ResponsePolicy::OneSucceeded),
                    ));
                    return cluster.route_command(cmd.clone(), everywhere).await;
                }
                return cluster.req_packed_command(cmd).await;
            }
            let mut conn = self.current()?;
            let result = conn.req_packed_command(cmd).await;
            self.check(result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            if let Some(cluster) = &self.inner.cluster {
                return cluster
                    .clone()
                    .req_packed_commands(pipeline, offset, count)
                    .await;
            }
            let mut conn = self.current()?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            // A pipeline's replies come back one by one, errors among them.
            if let Ok(replies) = &result
                && replies.iter().any(
                    |reply| matches!(reply, Value::ServerError(e) if demoted_code(Some(e.code()))),
                )
            {
                self.find_primary();
            }
            self.check(result)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}
