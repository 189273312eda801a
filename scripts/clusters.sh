#!/usr/bin/env bash
# The cluster scenarios (e2e/tests/clusters/): each starts its own cluster of a backing service
# from the installed Debian packages (ports and data directories of its own, stopped at the end;
# the machine's own services are never touched), runs two instances of each service under steady
# load through an outage of that cluster, and checks invariants 1-5 of docs/contract.md §4.3.
# `cargo test` only compiles them (they are #[ignore]d); this runs every one, one at a time, and
# prints what each saw.
#
#   scripts/clusters.sh                     # every scenario of the `clusters` target
#   scripts/clusters.sh rabbitmq_cluster    # the scenarios whose name contains a filter
#
# Needs: cargo, and the machine's PostgreSQL (127.0.0.1:5432), Redis (127.0.0.1:6379) and
# RabbitMQ (127.0.0.1:5672) for what a scenario does not cluster; rabbitmq-server and erlang
# for the RabbitMQ cluster (ports 56100-56199). Output: target/clusters/<UTC timestamp>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/order-inventory-target}"
out="target/clusters"
mkdir -p "$out"
log="$out/$(date -u +%Y%m%dT%H%M%SZ).log"

started=$(date +%s)
status=0
cargo test -p e2e --test clusters -- --ignored --test-threads=1 --nocapture "$@" 2>&1 \
  | tee "$log" || status=$?
echo "clusters: $(( $(date +%s) - started )) s in all (build included), exit $status; log: $log" \
  | tee -a "$log"
exit "$status"
