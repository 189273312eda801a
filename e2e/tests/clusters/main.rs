//! The services on clustered backing services the tests start themselves: several instances of
//! each service under steady load while a cluster loses a node, then invariants 1–5 of
//! docs/contract.md §4.3. Every scenario is ignored by `cargo test` (it starts its own clusters and runs
//! for a minute or more); `scripts/clusters.sh` runs them one at a time.

mod fleet;
mod postgres_standby;
mod rabbitmq_cluster;
mod redis_cluster;
mod redis_sentinel;
mod smoke;
