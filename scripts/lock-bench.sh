#!/usr/bin/env bash
# The lock table of docs/contract.md §6: every STOCK_LOCK measured against `redis` in one
# sitting, on lock services of the script's own (a Redis Cluster of three masters and three
# replicas, three independent redis-servers for Redlock, a three-member etcd cluster, a private
# redis-server for Redis's node loss), all on this machine.
#
#   scripts/lock-bench.sh RELEASE_DIR      # RELEASE_DIR holds order-service and inventory-service
#
# 1. Throughput: for each of redis-cluster, redlock, etcd and database, scripts/compare-builds.sh runs the same
#    build with A_ENV=STOCK_LOCK=redis and B_ENV=STOCK_LOCK=<it>, interleaved (A, B, A, B, …),
#    on direct-deductions (one hot product) and create-orders (1,000 products): per second,
#    (redis-cluster puts both services' Redis on the cluster: tokens too),
#    and the p99 of the lock's acquisitions (lock_wait_seconds). Its table's B/A is the ratio
#    to `redis` measured beside it.
# 2. A node lost under load: for redis (its private server), redis-cluster (the master of the
#    hot product's slot), redlock (one master of three) and etcd (the leader of three), direct-deductions for NODE_SECS; one node is killed 5 s in and
#    started again 7 s later. Prints what the clients saw (applied, refused, p99), what the lock
#    did (bypassed, lost, from /metrics), and whether the stock taken equals the deductions
#    answered 200 (no oversell).
#
# Knobs: RUNS (default 3), K6_DURATION (default 15s), NODE_SECS (default 20), PHASES (default
# "throughput nodes"), BACKENDS (default "redis-cluster redlock etcd database"). Needs redis-server, etcd and
# etcdctl (Debian's etcd-server and etcd-client), k6, jq, curl. Results in k6/results/locks-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: $0 RELEASE_DIR" >&2; exit 2; }
DIR="$1"
RUNS="${RUNS:-3}"
K6_DURATION="${K6_DURATION:-15s}"
export -n K6_DURATION
NODE_SECS="${NODE_SECS:-20}"
PHASES="${PHASES:-throughput nodes}"
BACKENDS="${BACKENDS:-redis-cluster redlock etcd database}"
export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
OUT="k6/results/locks-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
SCRATCH="$(mktemp -d /tmp/lock-bench.XXXXXX)"

for tool in redis-server redis-cli etcd etcdctl k6 jq curl; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

declare -A PID
. scripts/lib/redis_cluster.sh
cleanup() {
  local status=$? name
  for name in "${!PID[@]}"; do kill -KILL "${PID[$name]}" 2>/dev/null || true; done
  redis_cluster_stop
  wait 2>/dev/null || true
  rm -rf "$SCRATCH"
  return "$status"
}
trap cleanup EXIT

# --- the lock services ---------------------------------------------------------------------
REDIS_PORTS=() ETCD_CLIENT=() ETCD_PEER=()
for i in 0 1 2 3; do REDIS_PORTS+=("$(free_port)"); done
for i in 0 1 2; do ETCD_CLIENT+=("$(free_port)"); ETCD_PEER+=("$(free_port)"); done

start_redis() { # index
  redis-server --port "${REDIS_PORTS[$1]}" --save "" --appendonly no \
    >"$SCRATCH/redis-$1.log" 2>&1 &
  PID[redis$1]=$!
  for _ in $(seq 1 50); do redis-cli -p "${REDIS_PORTS[$1]}" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis-server $1 did not start" >&2; exit 1
}

INITIAL_CLUSTER="$(for i in 0 1 2; do printf 'm%s=http://127.0.0.1:%s,' "$i" "${ETCD_PEER[$i]}"; done)"
INITIAL_CLUSTER="${INITIAL_CLUSTER%,}"
start_etcd() { # index
  etcd --name "m$1" --data-dir "$SCRATCH/etcd-$1" \
    --listen-client-urls "http://127.0.0.1:${ETCD_CLIENT[$1]}" \
    --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT[$1]}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER[$1]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER[$1]}" \
    --initial-cluster "$INITIAL_CLUSTER" --initial-cluster-token "lock-bench-$$" \
    --initial-cluster-state new >"$SCRATCH/etcd-$1.log" 2>&1 &
  PID[etcd$1]=$!
}

ETCD_ENDPOINTS="$(for i in 0 1 2; do printf 'http://127.0.0.1:%s,' "${ETCD_CLIENT[$i]}"; done)"
ETCD_ENDPOINTS="${ETCD_ENDPOINTS%,}"
etcd_healthy() {
  ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" endpoint health >/dev/null 2>&1
}
etcd_leader() { # prints the index of the member that leads
  local status i
  for i in 0 1 2; do
    status="$(ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:${ETCD_CLIENT[$i]}" \
      endpoint status -w json 2>/dev/null)" || continue
    if [ "$(echo "$status" | jq '.[0].Status.header.member_id == .[0].Status.leader')" = true ]; then
      echo "$i"
      return
    fi
  done
  echo 0
}

for i in 0 1 2 3; do start_redis "$i"; done
for i in 0 1 2; do start_etcd "$i"; done
for _ in $(seq 1 100); do etcd_healthy && break; sleep 0.2; done
etcd_healthy || { echo "the etcd cluster did not start" >&2; tail "$SCRATCH"/etcd-*.log >&2; exit 1; }
redis_cluster_start "$SCRATCH/cluster"
REDLOCK_URLS="$(for i in 0 1 2; do printf 'redis://127.0.0.1:%s/0,' "${REDIS_PORTS[$i]}"; done)"
REDLOCK_URLS="${REDLOCK_URLS%,}"
PRIVATE_REDIS="redis://127.0.0.1:${REDIS_PORTS[3]}/0"

settings_of() { # backend: its STOCK_LOCK and addresses, as NAME=value words
  case "$1" in
    redis) echo "STOCK_LOCK=redis" ;;
    redis-cluster) echo "STOCK_LOCK=redis-cluster REDIS_CLUSTER_URLS=$REDIS_CLUSTER_URLS" ;;
    redlock) echo "STOCK_LOCK=redlock REDLOCK_URLS=$REDLOCK_URLS" ;;
    etcd) echo "STOCK_LOCK=etcd ETCD_ENDPOINTS=$ETCD_ENDPOINTS" ;;
    database) echo "STOCK_LOCK=database" ;;
  esac
}

# --- 1. throughput beside redis ------------------------------------------------------------
if [[ " $PHASES " == *" throughput "* ]]; then
  for backend in $BACKENDS; do
    echo "==> $backend against redis" >&2
    A_ENV="$(settings_of redis)" B_ENV="$(settings_of "$backend")" RUNS="$RUNS" \
      K6_DURATION="$K6_DURATION" WORKLOADS="direct-deductions create-orders" \
      scripts/compare-builds.sh "$DIR" "$DIR" | tee "$OUT/throughput-$backend.md"
  done
fi

# --- 2. a node lost under load -------------------------------------------------------------
kill_node() { # backend; sets NODE to what it killed (run in this shell, not in $(…): the
  # cluster's helpers keep their state in it)
  case "$1" in
    redis) kill -KILL "${PID[redis3]}"; wait "${PID[redis3]}" 2>/dev/null || true; NODE=redis3 ;;
    redis-cluster)
      local master
      master="$(redis_cluster_master_of "lock:product:{$HOT_ID}")"
      redis_cluster_kill "$master"
      NODE="cluster$master" ;;
    redlock) kill -KILL "${PID[redis0]}"; wait "${PID[redis0]}" 2>/dev/null || true; NODE=redis0 ;;
    etcd)
      local leader
      leader="$(etcd_leader)"
      kill -KILL "${PID[etcd$leader]}"; wait "${PID[etcd$leader]}" 2>/dev/null || true
      NODE="etcd$leader" ;;
  esac
}
restart_node() { # name
  case "$1" in
    cluster*) redis_cluster_restart "${1#cluster}" ;;
    redis*) start_redis "${1#redis}" ;;
    etcd*) start_etcd "${1#etcd}" ;;
  esac
}

node_loss() { # backend
  local backend=$1 port url run summary node
  port="$(free_port)"
  url="http://127.0.0.1:$port"
  run="locks_$$_$RANDOM"
  HOT_ID=$((RANDOM + 100000))
  # shellcheck disable=SC2046
  env ADMIN_TOKEN=lock-bench REDIS_URL="$PRIVATE_REDIS" REDIS_KEY_PREFIX="$run:" \
    AMQP_URL="amqp://guest:guest@127.0.0.1:1/%2f" RUST_LOG=warn NO_COLOR=1 \
    HTTP_ADDR="127.0.0.1:$port" DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/$run" \
    $(settings_of "$backend") "$DIR/inventory-service" >"$OUT/$run-$backend.log" 2>&1 &
  PID[service]=$!
  for _ in $(seq 1 120); do curl -fs "$url/healthz" >/dev/null && break; sleep 0.5; done
  sleep 2 # the lock service's first answers (a lease granted)
  summary="$OUT/node-loss-$backend.json"
  INVENTORY_URL="$url" ADMIN_TOKEN=lock-bench SUMMARY_FILE="$summary" DURATION="${NODE_SECS}s" \
    PRODUCT_ID="$HOT_ID" \
    k6 run -q k6/direct-deductions.js >"$OUT/node-loss-$backend.txt" 2>&1 &
  local k6_pid=$!
  sleep 5
  kill_node "$backend"
  node="$NODE"
  sleep 7
  restart_node "$node"
  wait "$k6_pid" || true
  local metrics
  metrics="$(curl -fs "$url/metrics")"
  counter() { echo "$metrics" | awk -v s="lock_acquisitions_total{result=\"$1\",backend=\"$backend\"}" '$1 == s { print $2 }'; }
  printf '| %s | %s killed 5 s in, back 7 s later | %s | %s | %s | %s | %s | %s |\n' \
    "$backend" "$node" \
    "$(jq -r '.report.deductions_applied' "$summary")" \
    "$(jq -r '.report.deductions_refused' "$summary")" \
    "$(jq -r '.report.deduction_p99_ms' "$summary")" \
    "$(counter bypassed)" "$(counter lost)" \
    "$(jq -r '.report.stock_matches_applied' "$summary")" | tee -a "$OUT/node-loss.md"
  kill -TERM "${PID[service]}"; wait "${PID[service]}" 2>/dev/null || true
  unset 'PID[service]'
  psql "postgres://$PGUSER@$PGHOST:$PGPORT/postgres" -qc "DROP DATABASE IF EXISTS \"$run\" WITH (FORCE)" >/dev/null 2>&1 || true
}

if [[ " $PHASES " == *" nodes "* ]]; then
  echo "| STOCK_LOCK | fault | applied | refused | p99 ms | bypassed | lost | stock taken = applied |" \
    | tee "$OUT/node-loss.md"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |" | tee -a "$OUT/node-loss.md"
  for backend in redis redis-cluster redlock etcd; do
    for _ in $(seq 1 50); do etcd_healthy && break; sleep 0.2; done
    for _ in $(seq 1 100); do redis_cluster_healthy && break; sleep 0.2; done
    node_loss "$backend"
  done
fi
echo "results in $OUT" >&2
