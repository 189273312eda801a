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
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance

log() { printf '\n==> %s\n' "$*"; }

. scripts/lib/stack.sh
stack_require schemathesis
trap stack_stop EXIT
trap 'exit 130' INT TERM

log "build"
stack_build

log "start both services"
stack_start schemathesis
LOG_DIR="$STACK_LOG_DIR"

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
