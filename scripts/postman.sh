#!/usr/bin/env bash
# Runs the Postman collection (postman/) with newman against both services:
#
#   scripts/postman.sh
#
# For each payment window of PAYMENT_WINDOW_SECS (default "3 0": 3 s, then off), in turn:
# 1. starts both services (built first, debug; RELEASE=1 for release) on free ports with a fresh
#    database each, their own Redis key prefix and RabbitMQ vhost (scripts/lib/stack.sh);
#    order-service runs with ORDER_PAYMENT_WINDOW_SECS set to the window, or without it for 0,
#    as scripts/run-local.sh starts it;
# 2. runs the collection twice in a row against them (two iterations: the second finds the
#    first one's data, which the collection must not trip over, since it makes fresh ids);
#    with the window off, the payment-window folder finds so and skips its requests;
# 3. stops the services and removes their state.
# Exits non-zero when any test of any run failed.
#
# Knobs: PAYMENT_WINDOW_SECS (one or more windows in seconds, space-separated; 0 = off),
# CARGO_TARGET_DIR, RELEASE, NEWMAN (the newman command, default `newman` on PATH).
# Needs: newman (`npm install newman`), and what scripts/lib/stack.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."

NEWMAN="${NEWMAN:-newman}"
PAYMENT_WINDOW_SECS="${PAYMENT_WINDOW_SECS:-3 0}"

log() { printf '\n==> %s\n' "$*"; }

for window in $PAYMENT_WINDOW_SECS; do
  case "$window" in
    '' | *[!0-9]*) echo "error: PAYMENT_WINDOW_SECS=$PAYMENT_WINDOW_SECS: expected whole seconds, 0 for off" >&2; exit 1 ;;
  esac
done

. scripts/lib/stack.sh
stack_require "$NEWMAN"
trap stack_stop EXIT
trap 'exit 130' INT TERM

log "build"
stack_build

failed=()
for window in $PAYMENT_WINDOW_SECS; do
  if [ "$window" -gt 0 ]; then
    # The collection's order waits for its confirm, and its last folder sees an unpaid order
    # expire.
    label="payment window ${window} s"
    run="postman_window_$window"
    export ORDER_PAYMENT_WINDOW_SECS="$window"
  else
    # Every reserved order is confirmed at once; the last folder skips itself.
    label="payment window off"
    run="postman_no_window"
    unset ORDER_PAYMENT_WINDOW_SECS
  fi

  log "start both services ($label)"
  stack_start "$run"

  log "newman ($label): postman/order-inventory.postman_collection.json, 2 iterations"
  "$NEWMAN" run postman/order-inventory.postman_collection.json \
    --environment postman/local.postman_environment.json \
    --env-var "order_url=$ORDER_URL" \
    --env-var "inventory_url=$INVENTORY_URL" \
    --env-var "admin_token=$ADMIN_TOKEN" \
    --iteration-count 2 \
    --color off \
    --reporters cli,junit \
    --reporter-junit-export "$STACK_LOG_DIR/newman.xml" \
    || failed+=("$label")

  stack_stop
done

if [ "${#failed[@]}" -gt 0 ]; then
  printf '\nerror: the collection failed with: %s\n' "${failed[*]}" >&2
  exit 1
fi
