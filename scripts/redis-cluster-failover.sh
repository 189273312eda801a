#!/usr/bin/env bash
# A master of a Redis Cluster fails over under a k6 create-orders run (docs/redis-cluster.md):
# both services on a cluster of the script's own (three masters, three replicas), k6 placing
# orders on 1,000 products for DURATION; SIGKILL to one master KILL_AFTER seconds in, started
# again once its replica took over. Prints what the clients saw: orders placed, answers 5xx
# (every route of both services, from /metrics, counted once both are ready), CROSSSLOT errors logged, the order POST's p99
# and max, and how long the slots had no master.
#
#   RELEASE=1 CARGO_TARGET_DIR=/var/tmp/release-target scripts/redis-cluster-failover.sh
#
# Knobs: DURATION (default 30s), KILL_AFTER (default 8), VUS (default 50), RUNS (default 1),
# REDIS_CLUSTER_WAIT_MS (default the services' 5000). Needs redis-server, redis-cli, k6, jq,
# curl, bc, psql, rabbitmqctl. Results in k6/results/redis-cluster-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-30s}"
KILL_AFTER="${KILL_AFTER:-8}"
VUS="${VUS:-50}"
RUNS="${RUNS:-1}"
OUT="k6/results/redis-cluster-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
SCRATCH="$(mktemp -d /tmp/redis-cluster.XXXXXX)"

for tool in redis-server redis-cli k6 jq curl bc; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
. scripts/lib/stack.sh
. scripts/lib/redis_cluster.sh
cleanup() {
  local status=$?
  stack_stop || true
  redis_cluster_stop
  rm -rf "$SCRATCH"
  return "$status"
}
trap cleanup EXIT

redis_cluster_start "$SCRATCH"
export REDIS_CLUSTER_URLS
[ -n "${REDIS_CLUSTER_WAIT_MS:-}" ] && export REDIS_CLUSTER_WAIT_MS

sum_5xx() { # base URL: answers 5xx since start, every route
  curl -fs "$1/metrics" | awk '/^http_requests_total\{/ && /status="5[0-9][0-9]"/ { n += $2 } END { print n + 0 }'
}

echo "| run | orders placed | orders/s | answers 5xx | CROSSSLOT logged | POST p99 ms | POST max ms | slots without a master s |" \
  | tee "$OUT/failover.md"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |" | tee -a "$OUT/failover.md"
for run in $(seq 1 "$RUNS"); do
  stack_start "redis_cluster_failover"
  # Counted from here: /readyz answers 503 while the services start.
  before=$(( $(sum_5xx "$ORDER_URL") + $(sum_5xx "$INVENTORY_URL") ))
  summary="$OUT/run-$run.json"
  ORDER_URL="$ORDER_URL" INVENTORY_URL="$INVENTORY_URL" ADMIN_TOKEN="$ADMIN_TOKEN" \
    SUMMARY_FILE="$summary" DURATION="$DURATION" VUS="$VUS" \
    k6 run -q k6/create-orders.js >"$OUT/run-$run.txt" 2>&1 &
  k6_pid=$!
  # setup() seeds the products first; the kill lands inside the measured part.
  for _ in $(seq 1 600); do grep -q "products 1..1000" "$OUT/run-$run.txt" 2>/dev/null && break; sleep 0.2; done
  sleep "$KILL_AFTER"
  victim="$(redis_cluster_master_of "failover-probe")"
  killed_at=$(date +%s.%N)
  redis_cluster_kill "$victim"
  redis_cluster_ok_after "failover-probe" "$victim" \
    || { echo "no replica took over from :$victim within 30 s" >&2; exit 1; }
  took="$(echo "$(date +%s.%N) - $killed_at" | bc)"
  redis_cluster_restart "$victim"
  wait "$k6_pid" || true
  errors=$(( $(sum_5xx "$ORDER_URL") + $(sum_5xx "$INVENTORY_URL") - before ))
  crossslot="$(cat "$STACK_LOG_DIR"/*.log | grep -c CROSSSLOT || true)"
  printf '| %s | %s | %s | %s | %s | %s | %s | %.1f |\n' "$run" \
    "$(jq -r '.report.orders_created' "$summary")" "$(jq -r '.report.orders_per_s' "$summary")" \
    "$errors" "$crossslot" \
    "$(jq -r '.report.order_post_p99_ms' "$summary")" \
    "$(jq -r '.metrics.order_post_duration.values.max // 0 | floor' "$summary")" \
    "$took" | tee -a "$OUT/failover.md"
  for log in "$STACK_LOG_DIR"/*.log; do cp "$log" "$OUT/run-$run-$(basename "$log")"; done
  stack_stop
  for _ in $(seq 1 100); do redis_cluster_healthy && break; sleep 0.2; done
  redis_cluster_healthy || { echo "the cluster did not recover after run $run" >&2; exit 1; }
done
echo "results in $OUT" >&2
