#!/usr/bin/env bash
# Runs the Postman collection (postman/) with newman against both services:
#
#   scripts/postman.sh
#
# 1. builds both services (debug; RELEASE=1 for release) and starts them on free ports with a
#    fresh database each, their own Redis key prefix and RabbitMQ vhost (scripts/lib/stack.sh);
#    order-service runs with a payment window of 3 s (ORDER_PAYMENT_WINDOW_SECS);
# 2. runs the collection twice in a row against them (two iterations: the second finds the
#    first one's data, which the collection must not trip over, since it makes fresh ids);
# 3. stops the services and removes their state; exits non-zero when any test failed.
#
# Knobs: CARGO_TARGET_DIR, RELEASE, NEWMAN (the newman command, default `newman` on PATH).
# Needs: newman (`npm install newman`), and what scripts/lib/stack.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."

NEWMAN="${NEWMAN:-newman}"

log() { printf '\n==> %s\n' "$*"; }

. scripts/lib/stack.sh
stack_require "$NEWMAN"
trap stack_stop EXIT
trap 'exit 130' INT TERM

log "build"
stack_build

log "start both services"
# With a payment window, so that the collection's order waits for its confirm and its last
# folder sees an unpaid order expire.
export ORDER_PAYMENT_WINDOW_SECS=3
stack_start postman

log "newman: postman/order-inventory.postman_collection.json, 2 iterations"
"$NEWMAN" run postman/order-inventory.postman_collection.json \
  --environment postman/local.postman_environment.json \
  --env-var "order_url=$ORDER_URL" \
  --env-var "inventory_url=$INVENTORY_URL" \
  --env-var "admin_token=$ADMIN_TOKEN" \
  --iteration-count 2 \
  --color off \
  --reporters cli,junit \
  --reporter-junit-export "$STACK_LOG_DIR/newman.xml"
