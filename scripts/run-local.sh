#!/usr/bin/env bash
# Runs the whole stack on this machine with one command, for a newcomer on a fresh clone:
#
#   scripts/run-local.sh
#
# 1. makes sure the database (PostgreSQL, or MariaDB with DB=mariadb), Redis and RabbitMQ
#    answer on localhost, starting any that is
#    installed but stopped;
# 2. builds both services in release mode;
# 3. starts them in the background (logs in target/run-local/*.log) and waits until both are ready;
# 4. seeds demo products 1001..1010 (stock 100 each);
# 5. prints the URLs, the admin token and a curl walkthrough, and runs that walkthrough once;
# 6. waits; Ctrl-C (or SIGTERM) stops both services gracefully.
#
# Knobs (environment):
#   DB               postgres (default) or mariadb: the backend both services run on
#                    (docs/database-backends.md); it picks the database URLs' defaults below
#   ADMIN_TOKEN      bearer token of the admin endpoints (default dev-admin-token)
#   ORDER_ADDR       order-service listen address (default 127.0.0.1:8080)
#   INVENTORY_ADDR   inventory-service listen address (default 127.0.0.1:8081)
#   ORDER_DATABASE_URL, INVENTORY_DATABASE_URL
#                    each service's own database (defaults postgres://postgres@127.0.0.1:5432/orders
#                    and …/inventory, or mysql://root@127.0.0.1:3306/… with DB=mariadb); a plain
#                    DATABASE_URL is deliberately not passed on, since the services must not share one
#   REDIS_URL, AMQP_URL, RUST_LOG and the other variables of docs/configuration.md pass through.
#   READY_TIMEOUT_SECS  how long to wait for /readyz (default 120: the first start creates the
#                    databases and applies migrations)
#   CARGO_TARGET_DIR honoured as cargo honours it (default: the repo's target/)
set -euo pipefail
cd "$(dirname "$0")/.."

ADMIN_TOKEN="${ADMIN_TOKEN:-dev-admin-token}"
ORDER_ADDR="${ORDER_ADDR:-127.0.0.1:8080}"
INVENTORY_ADDR="${INVENTORY_ADDR:-127.0.0.1:8081}"
DB="${DB:-postgres}"
case "$DB" in
  postgres) database_server="postgres://postgres@127.0.0.1:5432" ;;
  mariadb) database_server="mysql://root@127.0.0.1:3306" ;;
  *) printf 'error: DB=%s: expected postgres or mariadb\n' "$DB" >&2; exit 1 ;;
esac
ORDER_DATABASE_URL="${ORDER_DATABASE_URL:-$database_server/orders}"
INVENTORY_DATABASE_URL="${INVENTORY_DATABASE_URL:-$database_server/inventory}"
READY_TIMEOUT_SECS="${READY_TIMEOUT_SECS:-120}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
LOG_DIR="target/run-local"

# A service listening on 0.0.0.0 is reached through 127.0.0.1.
url_of() { echo "http://${1/0.0.0.0/127.0.0.1}"; }
ORDER_URL="$(url_of "$ORDER_ADDR")"
INVENTORY_URL="$(url_of "$INVENTORY_ADDR")"

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

for tool in cargo curl jq; do
  command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install $tool; cargo: https://rustup.rs)"
done

# --- 1. backing services --------------------------------------------------------------------
# Port probes with bash's /dev/tcp need no client tools and no privileges.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

postgres_up() {
  if command -v pg_isready >/dev/null; then pg_isready -h 127.0.0.1 -p 5432 -q; else port_open 5432; fi
}
mariadb_up() {
  if command -v mariadb-admin >/dev/null; then
    mariadb-admin -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1
  else
    port_open 3306
  fi
}
redis_up() {
  if command -v redis-cli >/dev/null; then
    [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]
  else
    port_open 6379
  fi
}
# RabbitMQ opens its AMQP port only once it has booted, so the port is the readiness signal
# (rabbitmqctl would need the Erlang cookie, i.e. root).
rabbitmq_up() { port_open 5672; }

start_postgres() {
  command -v pg_ctlcluster >/dev/null || return 1
  # The newest installed cluster version; Debian's layout is /etc/postgresql/<version>/main.
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start
}
start_mariadb() {
  [ -x /usr/sbin/mariadbd ] || return 1
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
}
start_redis() {
  command -v redis-server >/dev/null || return 1
  # Nothing on disk, like the Redis the services are specified against (docs/contract.md §4.1).
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
}
start_rabbitmq() {
  command -v rabbitmq-server >/dev/null || return 1
  rabbitmq-server -detached
}

ensure_backing() { # name, probe, starter
  local name="$1" probe="$2" starter="$3"
  if "$probe"; then
    echo "$name: up"
    return
  fi
  echo "$name: not answering; starting it"
  "$starter" || die "$name is not running and could not be started here; install and start it (README.md, \"Running it\")"
  local deadline=$((SECONDS + 60))
  until "$probe"; do
    [ "$SECONDS" -lt "$deadline" ] || die "$name did not come up within 60 s"
    sleep 1
  done
  echo "$name: up"
}

log "backing services"
if [ "$DB" = mariadb ]; then
  ensure_backing MariaDB mariadb_up start_mariadb
else
  ensure_backing PostgreSQL postgres_up start_postgres
fi
ensure_backing Redis redis_up start_redis
ensure_backing RabbitMQ rabbitmq_up start_rabbitmq

# --- 2. build ----------------------------------------------------------------------------------
log "building (release; the first build takes several minutes)"
cargo build --release -p order-service -p inventory-service

# --- 3. start ----------------------------------------------------------------------------------
# Refuse to start a second copy next to one that already listens: it would fail to bind, and
# the walkthrough below would silently talk to the old one.
for url in "$ORDER_URL" "$INVENTORY_URL"; do
  if curl -s -o /dev/null --max-time 2 "$url/healthz"; then
    die "something already answers at $url (another run-local.sh?); stop it or set ORDER_ADDR/INVENTORY_ADDR"
  fi
done

mkdir -p "$LOG_DIR"
ORDER_PID=""
INVENTORY_PID=""

# Stops whatever this script started: SIGTERM lets each service finish in-flight requests and
# messages (graceful shutdown); SIGKILL only if one hangs past the deadline.
stop_services() {
  trap - INT TERM HUP EXIT
  local pids=()
  for pid in "$ORDER_PID" "$INVENTORY_PID"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then pids+=("$pid"); fi
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  log "stopping services (SIGTERM)"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "process $pid did not stop within 30 s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
    wait "$pid" 2>/dev/null || true
  done
  echo "stopped"
}
trap 'stop_services; exit 130' INT
trap 'stop_services; exit 143' TERM HUP
trap 'stop_services' EXIT

# Each service is started in its own session (setsid), so a Ctrl-C in this terminal reaches only
# this script, which then stops both services in order with SIGTERM. DATABASE_URL and HTTP_ADDR
# are set per service: an exported DATABASE_URL in the caller's shell must not make both
# services share (and migrate) one database. NO_COLOR keeps ANSI colour codes out of the log files.
start_service() { # name, addr, database url, [extra VAR=value...]
  local name="$1" addr="$2" db="$3"
  shift 3
  env HTTP_ADDR="$addr" DATABASE_URL="$db" ADMIN_TOKEN="$ADMIN_TOKEN" RUST_LOG="${RUST_LOG:-info}" \
    NO_COLOR="${NO_COLOR:-1}" "$@" \
    setsid "$TARGET_DIR/release/$name" >"$LOG_DIR/$name.log" 2>&1 &
}

log "starting services (logs in $LOG_DIR/)"
start_service inventory-service "$INVENTORY_ADDR" "$INVENTORY_DATABASE_URL"
INVENTORY_PID=$!
start_service order-service "$ORDER_ADDR" "$ORDER_DATABASE_URL" INVENTORY_URL="$INVENTORY_URL"
ORDER_PID=$!
echo "inventory-service pid $INVENTORY_PID, order-service pid $ORDER_PID"

wait_ready() { # name, url, pid
  local name="$1" url="$2" pid="$3"
  local deadline=$((SECONDS + READY_TIMEOUT_SECS))
  until curl -fs -o /dev/null --max-time 3 "$url/readyz"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited during start; last log lines:" >&2
      tail -n 30 "$LOG_DIR/$name.log" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$name not ready after ${READY_TIMEOUT_SECS} s; /readyz says:" >&2
      curl -s --max-time 3 "$url/readyz" >&2 || true
      echo >&2
      # Without the lines our own /readyz polling caused, which would crowd out the cause.
      echo "last log lines:" >&2
      grep -v 'path=/readyz' "$LOG_DIR/$name.log" | tail -n 30 >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "$name ready at $url"
}
wait_ready inventory-service "$INVENTORY_URL" "$INVENTORY_PID"
wait_ready order-service "$ORDER_URL" "$ORDER_PID"

# --- 4. seed -----------------------------------------------------------------------------------
log "seeding demo products 1001..1010 (stock 100)"
for id in $(seq 1001 1010); do
  status=$(curl -s -o "$LOG_DIR/seed.json" -w '%{http_code}' -X POST "$INVENTORY_URL/products" \
    -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
    -d "{\"product_id\": $id, \"name\": \"Demo product $id\", \"stock\": 100}")
  case "$status" in
    201) echo "product $id created" ;;
    409) echo "product $id exists (kept as it is)" ;;
    *) echo "creating product $id answered $status:" >&2; cat "$LOG_DIR/seed.json" >&2; echo >&2; exit 1 ;;
  esac
done

# --- 5. tell, then show --------------------------------------------------------------------------
cat <<EOF

==> the stack is running

  order-service       $ORDER_URL        Swagger UI $ORDER_URL/docs        metrics $ORDER_URL/metrics
  inventory-service   $INVENTORY_URL        Swagger UI $INVENTORY_URL/docs        metrics $INVENTORY_URL/metrics
  admin token         $ADMIN_TOKEN   (Authorization: Bearer $ADMIN_TOKEN)
  logs                $LOG_DIR/order-service.log, $LOG_DIR/inventory-service.log

  Walkthrough:
    TOKEN=\$(curl -s -X POST $ORDER_URL/idempotency-tokens | jq -r .token)
    ORDER=\$(curl -s -X POST $ORDER_URL/orders -H "Idempotency-Key: \$TOKEN" \\
        -H 'Content-Type: application/json' \\
        -d '{"user_id": 1, "items": [{"product_id": 1001, "quantity": 1}], "amount": 10.0}' | jq -r .order_id)
    curl -s $ORDER_URL/orders/\$ORDER | jq .status          # PENDING, then CONFIRMED
    curl -s -X POST $ORDER_URL/orders/\$ORDER/cancel | jq .status   # CANCELLED; the stock comes back
    curl -s $INVENTORY_URL/products/1001 | jq .stock
EOF

# With end-user identity on (AUTH_JWT_SECRET exported), the walkthrough runs as user 1.
auth=()
if [ -n "${AUTH_JWT_SECRET:-}" ]; then
  auth=(-H "Authorization: Bearer $(scripts/mint-token.sh 1)")
  echo "  identity is on: add -H \"Authorization: Bearer \$(scripts/mint-token.sh 1)\" to the order-service calls above"
fi

log "running the walkthrough once"
token=$(curl -fsS "${auth[@]}" -X POST "$ORDER_URL/idempotency-tokens" | jq -r .token)
echo "token:  $token"
created=$(curl -fsS "${auth[@]}" -X POST "$ORDER_URL/orders" -H "Idempotency-Key: $token" \
  -H 'Content-Type: application/json' \
  -d '{"user_id": 1, "items": [{"product_id": 1001, "quantity": 1}], "amount": 10.0}')
order_id=$(jq -r .order_id <<<"$created")
echo "order:  $order_id ($(jq -r .status <<<"$created"))"

# Poll with a deadline: the order settles once inventory answered through RabbitMQ.
deadline=$((SECONDS + 30))
order="$created"
while [ "$(jq -r .status <<<"$order")" = PENDING ] && [ "$SECONDS" -lt "$deadline" ]; do
  sleep 0.2
  order=$(curl -fsS "${auth[@]}" "$ORDER_URL/orders/$order_id")
done
status=$(jq -r .status <<<"$order")
jq . <<<"$order"
case "$status" in
  CONFIRMED)
    echo "stock of 1001 after the order: $(curl -fsS "$INVENTORY_URL/products/1001" | jq .stock)"
    # Cancelling gives the unit back, so running this script again and again does not drain
    # the demo stock.
    cancelled=$(curl -fsS "${auth[@]}" -X POST "$ORDER_URL/orders/$order_id/cancel")
    echo "cancelled: $(jq -r .status <<<"$cancelled") (inventory releases the unit asynchronously)"
    ;;
  REJECTED)
    echo "warning: the order was REJECTED ($(jq -r .rejection_reason <<<"$order")); is product 1001 out of stock?" >&2
    ;;
  *)
    # Not fatal: the services stay up so the logs can be read and the API tried by hand.
    echo "warning: the order is still $status after 30 s; see $LOG_DIR/*.log" >&2
    ;;
esac

# --- 6. wait -------------------------------------------------------------------------------------
log "running; press Ctrl-C to stop both services"
# Returns when either service exits (or a signal runs the trap); then stop the other one.
set +e
wait -n "$ORDER_PID" "$INVENTORY_PID"
code=$?
set -e
for pair in "order-service:$ORDER_PID" "inventory-service:$INVENTORY_PID"; do
  name="${pair%%:*}" pid="${pair##*:}"
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "$name exited unexpectedly (code $code); last log lines:" >&2
    tail -n 30 "$LOG_DIR/$name.log" >&2
  fi
done
exit 1
