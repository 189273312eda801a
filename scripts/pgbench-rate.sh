#!/usr/bin/env bash
# PostgreSQL's own latency for the order statement at a fixed rate: the floor under the order
# POST's latency at that rate (docs/contract.md §6 compares the POST's p99 with it).
#
#   scripts/pgbench-rate.sh              # RATE=261 (twice the reference's W1), 20 s, 8 clients
#   RATE=163 SECS=20 RUNS=3 scripts/pgbench-rate.sh
#
# Runs k6/pgbench/order-tx.sql with `pgbench -R RATE` on a scratch database built from the
# order-service migrations, logging every transaction (-l), and prints the p50 and p99 of
# each run and their medians, in ms. Run it with the services stopped, right before or after
# the measurement it is compared with. Knobs: RATE, SECS (20), CLIENTS (8), RUNS (3),
# PGHOST/PGPORT/PGUSER.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-261}"
SECS="${SECS:-20}"
CLIENTS="${CLIENTS:-8}"
RUNS="${RUNS:-3}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
for tool in pgbench psql createdb dropdb; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

DB="pgbench_rate_$$"
work="$(mktemp -d /tmp/pgbench-rate.XXXXXX)"
cleanup() { dropdb --if-exists --force "$DB" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

createdb "$DB"
for migration in migrations/order-service/postgres/*.sql; do
  psql -q -X -v ON_ERROR_STOP=1 -d "$DB" -f "$migration" >/dev/null
done

threads=$(( $(nproc) < CLIENTS ? $(nproc) : CLIENTS ))
percentiles() { # log files...: latency is the third column, in microseconds
  cat "$@" | awk '{ print $3 / 1000 }' | sort -g | awk '
    { v[NR] = $1 }
    END { p50 = v[int(NR * 0.50) + 1]; p99 = v[int(NR * 0.99) + 1]; printf "%.2f %.2f %d\n", p50, p99, NR }'
}
for n in $(seq 1 "$RUNS"); do
  (cd "$work" && rm -f log.* && pgbench -n -M prepared -c "$CLIENTS" -j "$threads" -R "$RATE" \
    -T "$SECS" -l --log-prefix=log -f "$OLDPWD/k6/pgbench/order-tx.sql" "$DB" >"run-$n.txt" 2>&1) \
    || { cat "$work/run-$n.txt" >&2; exit 1; }
  read -r p50 p99 count < <(percentiles "$work"/log.*)
  echo "run $n: $count transactions at -R $RATE, p50 $p50 ms, p99 $p99 ms"
  echo "$p50 $p99" >>"$work/all.txt"
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median of $RUNS: p50 $(awk '{ print $1 }' "$work/all.txt" | median) ms, p99 $(awk '{ print $2 }' "$work/all.txt" | median) ms"
