#!/usr/bin/env bash
# Checks that both services do what their OpenAPI documents say, with schemathesis 4.x:
#
#   scripts/schemathesis.sh
#
# 1. builds both services (debug, the profile the tests already built; RELEASE=1 for release);
# 2. starts each on a free port against a fresh database of its own, its own Redis key prefix
#    and its own RabbitMQ vhost (created with rabbitmqctl, deleted at the end);
# 3. runs schemathesis against each (no server error, only documented status codes, content
#    types and response bodies), with the admin token so admin operations are exercised too;
# 4. stops the services, drops the databases, the Redis keys and the vhost; exits non-zero
#    when any check failed.
#
# Knobs: SCHEMATHESIS_MAX_TIME (seconds per service, default 120), CARGO_TARGET_DIR.
# Needs: cargo, curl, psql, redis-cli, rabbitmqctl, schemathesis (pip install 'schemathesis>=4,<5').
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_TIME="${SCHEMATHESIS_MAX_TIME:-120}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
PROFILE=debug
BUILD_FLAGS=()
if [ "${RELEASE:-0}" = 1 ]; then PROFILE=release; BUILD_FLAGS=(--release); fi
RUN="st_$(date +%s)_$$"
ADMIN_TOKEN="schemathesis-$RUN"
PG_SERVER="${TEST_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}"
REDIS_PREFIX="$RUN:"
VHOST="$RUN"
LOG_DIR="$TARGET_DIR/schemathesis"
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance

log() { printf '\n==> %s\n' "$*"; }

for tool in cargo curl psql redis-cli rabbitmqctl schemathesis; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 1; }
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

PIDS=()
cleanup() {
  local status=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for db in "t_${RUN}_orders" "t_${RUN}_inventory"; do
    psql "$PG_SERVER/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
  redis-cli --scan --pattern "$REDIS_PREFIX*" 2>/dev/null | xargs -r redis-cli del >/dev/null 2>&1 || true
  rabbitmqctl -q delete_vhost "$VHOST" >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "build ($PROFILE)"
cargo build "${BUILD_FLAGS[@]}" --locked -p order-service -p inventory-service --bins

log "vhost $VHOST"
rabbitmqctl -q add_vhost "$VHOST"
rabbitmqctl -q set_permissions -p "$VHOST" guest '.*' '.*' '.*'
AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$VHOST"

mkdir -p "$LOG_DIR"
ORDER_PORT="$(free_port)"
INVENTORY_PORT="$(free_port)"
ORDER_URL="http://127.0.0.1:$ORDER_PORT"
INVENTORY_URL="http://127.0.0.1:$INVENTORY_PORT"

start() { # name port database
  local name=$1 port=$2 database=$3
  env HTTP_ADDR="127.0.0.1:$port" DATABASE_URL="$PG_SERVER/$database" \
    DATABASE_MAX_CONNECTIONS=10 REDIS_KEY_PREFIX="$REDIS_PREFIX" AMQP_URL="$AMQP_URL" \
    ADMIN_TOKEN="$ADMIN_TOKEN" INVENTORY_URL="$INVENTORY_URL" RUST_LOG="${RUST_LOG:-warn}" \
    "$TARGET_DIR/$PROFILE/$name" >"$LOG_DIR/$name.log" 2>&1 &
  PIDS+=($!)
}
log "start both services (logs in $LOG_DIR)"
start order-service "$ORDER_PORT" "t_${RUN}_orders"
start inventory-service "$INVENTORY_PORT" "t_${RUN}_inventory"
for url in "$ORDER_URL" "$INVENTORY_URL"; do
  for _ in $(seq 1 120); do
    curl -fs "$url/readyz" >/dev/null && break
    sleep 0.5
  done
  curl -fsS "$url/readyz" >/dev/null || { echo "error: $url never became ready" >&2; tail -n 50 "$LOG_DIR"/*.log >&2; exit 1; }
done

# A few products, so reads and deductions also reach the paths where something exists.
for id in 1 2 3; do
  curl -fsS -o /dev/null -X POST "$INVENTORY_URL/products" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'content-type: application/json' -d "{\"product_id\": $id, \"name\": \"Product $id\", \"stock\": 1000}"
done

failed=0
for target in "order-service $ORDER_URL" "inventory-service $INVENTORY_URL"; do
  set -- $target
  log "schemathesis: $1"
  if ! schemathesis --no-color run "$2/openapi.json" --url "$2" \
      --checks "$CHECKS" --max-time "$MAX_TIME" \
      -H "Authorization: Bearer $ADMIN_TOKEN" \
      --report junit --report-dir "$LOG_DIR/$1-report"; then
    failed=1
  fi
done

if grep -q '"level":"ERROR"\| ERROR ' "$LOG_DIR"/*.log; then
  echo "note: the services logged errors (see $LOG_DIR)" >&2
fi
exit "$failed"
