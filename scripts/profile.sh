#!/usr/bin/env bash
# Where the CPU goes at a steady rate: samples the whole machine while k6's create-orders runs
# at a constant RATE, and draws flame graphs of it.
#
#   scripts/profile.sh                   # RATE=261 (twice the reference's W1) for 20 s
#   RATE=600 DURATION=30s BUILD=0 scripts/profile.sh
#
# Starts both services afresh (release build, scripts/lib/stack.sh) on new databases, seeds
# products 1..1000 in SQL, then records `perf record -a -g -e cpu-clock` (a software clock:
# this machine's perf has no hardware counters) during the k6 run. Writes to
# target/profile/<timestamp>/:
#   machine.svg   every process on the machine, by process and then by stack
#   services.svg  the two services only, their stacks unwound with DWARF (a second run)
#   by-process.txt  the share of samples of each process group, and CPU ms per order
# Needs: perf, k6, jq, psql, inferno (cargo install inferno). Knobs: RATE, DURATION, FREQ
# (samples per second per CPU, default 499), MINWIDTH (frames narrower than this many pixels are
# left out of the graphs, default 1), BUILD (1: build first; 0: use what is built),
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-261}"
DURATION="${DURATION:-20s}"
FREQ="${FREQ:-499}"
export RELEASE=1
for tool in perf k6 jq psql inferno-collapse-perf inferno-flamegraph; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (inferno: cargo install inferno)" >&2; exit 1; }
done

out="target/profile/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
. scripts/lib/stack.sh
. scripts/lib/cpu.sh
. scripts/lib/seed.sh
trap stack_stop EXIT
[ "${BUILD:-1}" = 1 ] && stack_build

# One run: a fresh stack, products, then k6 at RATE while `perf record "$@"` samples; an
# option SERVICES stands for `-p` and the two services' process ids.
profiled_run() { # name, perf record options...
  local name=$1 option options=()
  shift
  stack_start "profile-$name"
  for option in "$@"; do
    if [ "$option" = SERVICES ]; then
      options+=(-p "$(IFS=,; echo "${STACK_PIDS[*]}")")
    else
      options+=("$option")
    fi
  done
  seed_benchmark_products "$STACK_PG_SERVER/t_${STACK_RUN}_inventory"
  sleep 2
  local before after seconds
  seconds="${DURATION%s}"
  before="$(cpu_snapshot)"
  perf record -F "$FREQ" -e cpu-clock -o "$out/$name.data" "${options[@]}" -- sleep "$seconds" \
    >"$out/$name-perf.log" 2>&1 &
  local perf_pid=$!
  env ORDER_URL="$ORDER_URL" INVENTORY_URL="$INVENTORY_URL" ADMIN_TOKEN="$ADMIN_TOKEN" \
    RATE="$RATE" VUS=50 DURATION="$DURATION" SEEDED=1 P99_MS=60000 \
    SUMMARY_FILE="$out/$name-k6.json" k6 run -q k6/create-orders.js >"$out/$name-k6.log" 2>&1 || true
  wait "$perf_pid"
  after="$(cpu_snapshot)"
  local orders
  orders="$(jq -r '.report.orders_created' "$out/$name-k6.json")"
  {
    echo "$name: $orders orders at $RATE/s; CPU ms per order:"
    cpu_per_order "$before" "$after" "$orders"
    echo "own (both services, PostgreSQL, Redis): $(cpu_own_ms "$before" "$after" "$orders")"
  } >>"$out/by-process.txt"
  stack_stop
}

# The whole machine, kernel stacks and frame-pointer user stacks (what does not keep frame
# pointers shows as a flat top frame; the process split is exact either way).
profiled_run machine -a -g
perf script -i "$out/machine.data" 2>/dev/null | inferno-collapse-perf --all >"$out/machine.folded"
inferno-flamegraph --minwidth "${MINWIDTH:-1}" --title "The machine at $RATE orders/s (perf, cpu-clock)" \
  <"$out/machine.folded" >"$out/machine.svg"
# The share of samples per command name, which is what the flame graph's first level shows.
awk '{ split($1, frames, ";"); n[frames[1]] += $NF; total += $NF }
     END { for (c in n) printf "%6.1f%%  %s\n", 100 * n[c] / total, c }' "$out/machine.folded" \
  | sort -rn | head -20 >"$out/by-command.txt"

# Inside the two services, unwound with DWARF (no frame pointers needed).
profiled_run services --call-graph dwarf,16384 SERVICES
perf script -i "$out/services.data" 2>/dev/null | inferno-collapse-perf >"$out/services.folded"
inferno-flamegraph --minwidth "${MINWIDTH:-1}" --title "Both services at $RATE orders/s (perf, cpu-clock, DWARF)" \
  <"$out/services.folded" >"$out/services.svg"

cat "$out/by-process.txt" "$out/by-command.txt"
echo "flame graphs: $out/machine.svg, $out/services.svg"
