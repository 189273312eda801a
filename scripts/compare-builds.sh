#!/usr/bin/env bash
# Compares two release builds on the same workloads, interleaved in one sitting (A, B, A, B,
# A, B), so that a slow minute of the machine hits both alike. Each run gets fresh databases,
# a fresh vhost and a fresh Redis prefix, starts both services of its build, runs one k6
# workload and stops them.
#
#   scripts/compare-builds.sh A_DIR B_DIR            # each DIR holds order-service and
#                                                    # inventory-service (a target/release)
#   WORKLOADS="direct-deductions" RUNS=5 scripts/compare-builds.sh …
#   WORKLOADS=moderate RATE=261 scripts/compare-builds.sh …   # the cost of an order at a rate
#
# Prints one line per run and a table of medians with B/A. Knobs (environment): WORKLOADS
# (default "create-orders flash-sale direct-deductions"; also checkout, moderate and idle), RUNS
# (default 3), K6_DURATION (create-orders, direct-deductions, checkout and moderate, default
# 20s), VUS (create-orders, default
# 50), RATE (moderate, default 261: twice the reference's W1), PGHOST/PGPORT/PGUSER,
# REDIS_URL; A_ENV and B_ENV, settings for one side only ("BATCH_LINGER_MS=2", to compare one
# build with itself); any other variable the services read passes through to both. Ports
# 18080/18081 must be free.
#
# direct-deductions and create-orders also give the p99 of the stock lock's acquisitions
# (lock_wait_seconds). create-orders also gives the CPU ms per order of our own processes at saturation (k6's setup,
# 1,000 product reads, counted with it). `moderate` is create-orders at a constant RATE on products seeded in SQL (so nothing but the
# orders is counted), and gives four figures per run: CPU ms per order of our own processes
# (both services, PostgreSQL, Redis: scripts/lib/cpu.sh), the order POST's p99, and the p50
# and p99 of created → settled (order-service's order_end_to_end_seconds). Both also give the
# CPU per order of each process: both services, PostgreSQL, Redis, RabbitMQ, and k6 itself,
# and the context switches per order of each but k6 (how often its threads slept and were woken).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 2 ] || { echo "usage: $0 A_DIR B_DIR" >&2; exit 2; }
A_DIR="$1" B_DIR="$2"
WORKLOADS="${WORKLOADS:-create-orders flash-sale direct-deductions}"
RUNS="${RUNS:-3}"
K6_DURATION="${K6_DURATION:-20s}"
# k6 itself reads K6_DURATION from the environment and then drops the scripts' scenarios (one
# VU for that long): pass it on as the scripts' own DURATION only.
export -n K6_DURATION
VUS="${VUS:-50}"
RATE="${RATE:-261}"
export -n RATE
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
ADMIN_TOKEN=compare-admin-token
ORDER_URL=http://127.0.0.1:18080
INVENTORY_URL=http://127.0.0.1:18081
export ORDER_URL INVENTORY_URL ADMIN_TOKEN

for tool in k6 jq curl createdb dropdb rabbitmqctl; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
for dir in "$A_DIR" "$B_DIR"; do
  for bin in order-service inventory-service; do
    [ -x "$dir/$bin" ] || { echo "$dir/$bin is not an executable" >&2; exit 1; }
  done
done

. scripts/lib/cpu.sh
. scripts/lib/seed.sh

OUT="k6/results/compare-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
PIDS=()
RUN_ID=""

stop_run() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
  if [ -n "$RUN_ID" ]; then
    dropdb --if-exists --force "cmp_orders_$RUN_ID" 2>/dev/null || true
    dropdb --if-exists --force "cmp_stock_$RUN_ID" 2>/dev/null || true
    rabbitmqctl -q delete_vhost "cmp_$RUN_ID" >/dev/null 2>&1 || true
    RUN_ID=""
  fi
}
trap stop_run EXIT

wait_ready() { # url
  for _ in $(seq 1 240); do
    curl -fs -o /dev/null --max-time 2 "$1/readyz" && return 0
    sleep 0.5
  done
  echo "not ready: $1" >&2
  return 1
}

start_build() { # dir, label
  RUN_ID="$2_$$_$RANDOM"
  rabbitmqctl -q add_vhost "cmp_$RUN_ID" >/dev/null
  rabbitmqctl -q set_permissions -p "cmp_$RUN_ID" guest '.*' '.*' '.*' >/dev/null
  local amqp="amqp://guest:guest@127.0.0.1:5672/cmp_$RUN_ID"
  local side_env="${2}_ENV"
  # shellcheck disable=SC2206
  local common=(ADMIN_TOKEN="$ADMIN_TOKEN" REDIS_URL="$REDIS_URL" REDIS_KEY_PREFIX="cmp:$RUN_ID:"
    AMQP_URL="$amqp" RUST_LOG=warn NO_COLOR=1 ${!side_env:-})
  env "${common[@]}" HTTP_ADDR=127.0.0.1:18081 \
    DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/cmp_stock_$RUN_ID" \
    "$1/inventory-service" >"$OUT/$RUN_ID-inventory.log" 2>&1 &
  PIDS+=($!)
  env "${common[@]}" HTTP_ADDR=127.0.0.1:18080 INVENTORY_URL="$INVENTORY_URL" \
    DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/cmp_orders_$RUN_ID" \
    "$1/order-service" >"$OUT/$RUN_ID-order.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$INVENTORY_URL" && wait_ready "$ORDER_URL"
}

# The figure each workload is compared on (higher is better for all but flash-sale).
figure() { # workload, summary file
  case "$1" in
    create-orders) jq -r '.report.orders_per_s' "$2" ;;
    flash-sale) jq -r '.report.time_until_all_terminal_s' "$2" ;;
    direct-deductions) jq -r '.report.deductions_per_s' "$2" ;;
    checkout) jq -r '.report.holds_per_s' "$2" ;;
  esac
}

record() { # figure, label, value
  echo "$1 $2 $3" >&2
  echo "$1 $2 $3" >>"$OUT/runs.txt"
}

# Runs a command with its output to a file and prints the CPU seconds it and its children
# used, user + system: k6's own cost, which /proc no longer shows once it exited.
timed() { # output file, command…
  local out="$1" TIMEFORMAT='%U %S' spent
  shift
  spent="$( { time "$@" >"$out" 2>&1 || true; } 2>&1 )"
  echo "$spent" | tail -1 | awk '{ print $1 + $2 }'
}

# Where the CPU of an order went, process by process: our own (both services, PostgreSQL,
# Redis) and the rest of the machine (RabbitMQ, and k6 itself); and how often each process's
# threads slept and were woken again per order (context switches, a count).
record_others() { # workload, label, before, after, orders, k6 CPU seconds, switches before, after
  local group
  for group in postgresql order-service inventory-service redis rabbitmq; do
    record "$1-$group-cpu-ms-per-order" "$2" "$(cpu_group_ms "$3" "$4" "$5" "$group")"
  done
  record "$1-k6-cpu-ms-per-order" "$2" "$(awk -v s="$6" -v n="$5" 'BEGIN { printf "%.2f", 1000 * s / n }')"
  for group in postgresql order-service inventory-service redis rabbitmq; do
    record "$1-$group-switches-per-order" "$2" "$(switches_per_order "$7" "$8" "$5" "$group")"
  done
}

# create-orders at a constant rate: what an order costs, and how long it takes to settle.
run_moderate() { # dir, label
  start_build "$1" "$2"
  seed_benchmark_products "postgres://$PGUSER@$PGHOST:$PGPORT/cmp_stock_$RUN_ID"
  sleep 2
  local summary="$OUT/$RUN_ID-moderate.json" before after orders switched waking
  switched="$(switch_snapshot)"
  before="$(cpu_snapshot)"
  local k6_cpu
  k6_cpu="$(timed "$OUT/$RUN_ID-moderate.txt" env SUMMARY_FILE="$summary" DURATION="$K6_DURATION" \
    RATE="$RATE" VUS=50 SEEDED=1 P99_MS=60000 k6 run -q k6/create-orders.js)"
  sleep 3 # the last orders settle
  after="$(cpu_snapshot)"
  waking="$(switch_snapshot)"
  orders="$(jq -r '.report.orders_created' "$summary" 2>/dev/null || echo 0)"
  if [ "${orders:-0}" -gt 0 ]; then
    local settle
    settle="$(curl -fs "$ORDER_URL/metrics" | scripts/lib/quantile.py order_end_to_end_seconds 0.5 0.99)"
    record moderate-cpu-ms-per-order "$2" "$(cpu_own_ms "$before" "$after" "$orders")"
    record_others moderate "$2" "$before" "$after" "$orders" "$k6_cpu" "$switched" "$waking"
    record moderate-post-p99-ms "$2" "$(jq -r '.report.order_post_p99_ms' "$summary")"
    record moderate-settle-p50-ms "$2" "${settle% *}"
    record moderate-settle-p99-ms "$2" "${settle#* }"
    record moderate-accepted-share "$2" "$(jq -r '.report.accepted_share' "$summary")"
  else
    echo "moderate $2: no orders created" >&2
  fi
  stop_run
}

# Nothing asked of the stack for as long as a run lasts: what its background work (relays,
# expiry, reconciliation, health checks, metrics) costs, in CPU ms per second of our own
# processes, and as a share of an order at the moderate RATE.
run_idle() { # dir, label
  start_build "$1" "$2"
  sleep 5
  local before after seconds="${K6_DURATION%s}"
  before="$(cpu_snapshot)"
  sleep "$seconds"
  after="$(cpu_snapshot)"
  local per_s
  per_s="$(cpu_own_ms "$before" "$after" "$seconds")"
  record idle-cpu-ms-per-s "$2" "$per_s"
  record idle-cpu-ms-per-order-at-rate "$2" "$(awk -v c="$per_s" -v r="$RATE" 'BEGIN { printf "%.3f", c / r }')"
  stop_run
}

run_one() { # workload, dir, label
  if [ "$1" = moderate ] || [ "$1" = idle ]; then
    "run_$1" "$2" "$3"
    return
  fi
  start_build "$2" "$3"
  local summary="$OUT/$RUN_ID-$1.json"
  local knobs=(DURATION="$K6_DURATION")
  [ "$1" = create-orders ] && knobs+=(VUS="$VUS")
  local before after k6_cpu switched waking
  switched="$(switch_snapshot)"
  before="$(cpu_snapshot)"
  k6_cpu="$(timed "$OUT/$RUN_ID-$1.txt" env SUMMARY_FILE="$summary" "${knobs[@]}" \
    k6 run -q "k6/$1.js")"
  local value
  value="$(figure "$1" "$summary" 2>/dev/null || echo n/a)"
  if [ "$1" = create-orders ] && [ "$value" != n/a ]; then
    sleep 2 # the last orders settle
    after="$(cpu_snapshot)"
    waking="$(switch_snapshot)"
    local orders
    orders="$(jq -r '.report.orders_created' "$summary")"
    record create-orders-cpu-ms-per-order "$3" "$(cpu_own_ms "$before" "$after" "$orders")"
    record_others create-orders "$3" "$before" "$after" "$orders" "$k6_cpu" "$switched" "$waking"
  fi
  if [ "$1" = direct-deductions ] || [ "$1" = create-orders ]; then
    # The stock lock's acquisitions over the run (lock_wait_seconds, every backend's series).
    record "$1-lock-wait-p99-ms" "$3" \
      "$(curl -fs "$INVENTORY_URL/metrics" | scripts/lib/quantile.py lock_wait_seconds 0.99)"
  fi
  if [ "$1" = flash-sale ]; then
    local invariants
    invariants="$(jq -r '.report.invariants' "$summary" 2>/dev/null || echo n/a)"
    echo "$1 $3 $value (invariants: $invariants)" >&2
  else
    echo "$1 $3 $value" >&2
  fi
  echo "$1 $3 $value" >>"$OUT/runs.txt"
  stop_run
}

for workload in $WORKLOADS; do
  for _ in $(seq 1 "$RUNS"); do
    run_one "$workload" "$A_DIR" A
    run_one "$workload" "$B_DIR" B
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "| workload | A (runs) | B (runs) | median A | median B | B/A |"
echo "| --- | --- | --- | --- | --- | --- |"
for workload in $(awk '{ print $1 }' "$OUT/runs.txt" | awk '!seen[$0]++'); do
  a_runs="$(awk -v w="$workload" '$1 == w && $2 == "A" { print $3 }' "$OUT/runs.txt")"
  b_runs="$(awk -v w="$workload" '$1 == w && $2 == "B" { print $3 }' "$OUT/runs.txt")"
  a_med="$(echo "$a_runs" | median)"
  b_med="$(echo "$b_runs" | median)"
  ratio="$(awk -v a="$a_med" -v b="$b_med" 'BEGIN { if (a + 0 > 0) printf "%.2f", b / a; else print "n/a" }')"
  echo "| $workload | $(echo "$a_runs" | paste -sd/ -) | $(echo "$b_runs" | paste -sd/ -) | $a_med | $b_med | $ratio |"
done
echo
echo "(flash-sale: seconds until all 2,000 orders are terminal; moderate-*: lower is better too; results in $OUT)"
