# Both services as processes on this machine, against the local PostgreSQL, Redis and
# RabbitMQ, with state of their own: a fresh database per service, a Redis key prefix and a
# RabbitMQ vhost (created with rabbitmqctl), each on a free port. Sourced by the scripts that
# check the running services from outside (schemathesis.sh, postman.sh,
# check-observability.sh):
#
#   . scripts/lib/stack.sh
#   trap stack_stop EXIT          # stops the services, drops the databases, keys and vhost
#   stack_build                   # debug binaries (RELEASE=1: release) in CARGO_TARGET_DIR
#   stack_start NAME              # NAME names the run and its log directory
#   # then ORDER_URL, INVENTORY_URL, ADMIN_TOKEN and STACK_LOG_DIR are set, both services ready
#
# Knobs: CARGO_TARGET_DIR, RELEASE, RUST_LOG (default warn), TEST_DATABASE_SERVER. A caller
# with a RabbitMQ node of its own sets STACK_AMQP_PORT and STACK_RABBITMQCTL=(rabbitmqctl -n NODE)
# before stack_start.
# Needs: cargo, curl, psql, redis-cli, rabbitmqctl, python3.

STACK_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
STACK_PROFILE=debug
STACK_BUILD_FLAGS=()
if [ "${RELEASE:-0}" = 1 ]; then STACK_PROFILE=release; STACK_BUILD_FLAGS=(--release); fi
STACK_PG_SERVER="${TEST_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}"
STACK_AMQP_PORT=5672
STACK_RABBITMQCTL=(rabbitmqctl)
STACK_PIDS=()
STACK_RUN=""

stack_require() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 1; }
  done
}
stack_require cargo curl psql redis-cli rabbitmqctl python3

stack_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stack_build() {
  cargo build "${STACK_BUILD_FLAGS[@]}" --locked -p order-service -p inventory-service --bins
}

# Stops what stack_start started and removes the run's state; as an EXIT trap it keeps the
# script's exit status.
stack_stop() {
  local status=$? pid db
  for pid in "${STACK_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STACK_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  STACK_PIDS=()
  if [ -n "$STACK_RUN" ]; then
    for db in "t_${STACK_RUN}_orders" "t_${STACK_RUN}_inventory"; do
      psql "$STACK_PG_SERVER/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
    done
    redis-cli --scan --pattern "$STACK_RUN:*" 2>/dev/null | xargs -r redis-cli del >/dev/null 2>&1 || true
    "${STACK_RABBITMQCTL[@]}" -q delete_vhost "$STACK_RUN" >/dev/null 2>&1 || true
    STACK_RUN=""
  fi
  return "$status"
}

stack_start() { # name
  local name=$1 url
  STACK_RUN="${name}_$(date +%s)_$$"
  ADMIN_TOKEN="$name-$STACK_RUN"
  STACK_LOG_DIR="$STACK_TARGET_DIR/$name"
  mkdir -p "$STACK_LOG_DIR"

  "${STACK_RABBITMQCTL[@]}" -q add_vhost "$STACK_RUN"
  "${STACK_RABBITMQCTL[@]}" -q set_permissions -p "$STACK_RUN" guest '.*' '.*' '.*'

  local order_port inventory_port
  order_port="$(stack_free_port)"
  inventory_port="$(stack_free_port)"
  ORDER_URL="http://127.0.0.1:$order_port"
  INVENTORY_URL="http://127.0.0.1:$inventory_port"
  stack_spawn order-service "$order_port" "t_${STACK_RUN}_orders"
  stack_spawn inventory-service "$inventory_port" "t_${STACK_RUN}_inventory"
  for url in "$ORDER_URL" "$INVENTORY_URL"; do
    for _ in $(seq 1 120); do
      curl -fs "$url/readyz" >/dev/null && break
      sleep 0.5
    done
    curl -fsS "$url/readyz" >/dev/null || {
      echo "error: $url never became ready" >&2
      tail -n 50 "$STACK_LOG_DIR"/*.log >&2
      exit 1
    }
  done
}

stack_spawn() { # binary port database
  local name=$1 port=$2 database=$3
  env HTTP_ADDR="127.0.0.1:$port" DATABASE_URL="$STACK_PG_SERVER/$database" \
    DATABASE_MAX_CONNECTIONS=10 REDIS_KEY_PREFIX="$STACK_RUN:" \
    AMQP_URL="amqp://guest:guest@127.0.0.1:$STACK_AMQP_PORT/$STACK_RUN" \
    ADMIN_TOKEN="$ADMIN_TOKEN" INVENTORY_URL="$INVENTORY_URL" RUST_LOG="${RUST_LOG:-warn}" \
    "$STACK_TARGET_DIR/$STACK_PROFILE/$name" >"$STACK_LOG_DIR/$name.log" 2>&1 &
  STACK_PIDS+=($!)
}
