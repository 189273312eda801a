#!/usr/bin/env bash
# Chaos run: a seeded, reproducible schedule of faults (kill -9, SIGSTOP/SIGCONT of any
# instance; PostgreSQL, Redis and RabbitMQ restarted; a proxy cut between one instance and one
# backing service) against two instances of each service under mixed load, every request
# recorded; then a checker that judges the run from that history alone. docs/chaos.md says
# what is checked and how unknown outcomes are treated.
#
#   scripts/chaos.sh                        # 10 minutes, a fault every 20 s, a random seed
#   CHAOS_SEED=7 CHAOS_SECS=120 scripts/chaos.sh
#   scripts/chaos.sh --ci                   # the short fixed schedule (each fault kind at least once)
#   python3 scripts/chaos/check.py target/chaos/<run>/history.jsonl   # check a history again
#
# Knobs: CHAOS_SEED (default random, printed), CHAOS_SECS (600), CHAOS_FAULT_EVERY (20),
# CHAOS_BIN_DIR (the binaries; default ${CARGO_TARGET_DIR:-target}/debug, built when missing),
# CHAOS_WORKERS (6), CHAOS_PORT_OFFSET (0; added to every port, to run two at once).
# Every backing service is a private instance on ports of its own (PostgreSQL 21432, Redis
# 21379, RabbitMQ 21672 and 21673, proxies 22000-22032 and 22999, services 21080-21083, all
# below the ephemeral port range), stopped
# at the end; the machine's own are never touched.
# Output: target/chaos/<UTC timestamp>-seed<N>/ (history.jsonl, schedule.json and .txt,
# events.log, report.md, every service's and backing service's log). Exit status: 0 when the
# checker found nothing, 1 on a violation, 2 when the run could not start or complete.
# Needs: python3, redis-server, rabbitmq-server, PostgreSQL's server binaries, pg_isready.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in python3 redis-server redis-cli rabbitmq-server rabbitmqctl pg_isready; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 2; }
done
bin_dir="${CHAOS_BIN_DIR:-${CARGO_TARGET_DIR:-target}/debug}"
if [ ! -x "$bin_dir/order-service" ] || [ ! -x "$bin_dir/inventory-service" ]; then
  if [ -n "${CHAOS_BIN_DIR:-}" ]; then
    echo "error: no order-service and inventory-service in CHAOS_BIN_DIR=$CHAOS_BIN_DIR" >&2; exit 2
  fi
  cargo build --bins -p order-service -p inventory-service
fi
exec python3 scripts/chaos/run.py --bin-dir "$(cd "$bin_dir" && pwd)" "$@"
