#!/usr/bin/env bash
# Checks deploy/observability/: the Prometheus configuration, the alert rules and the
# Grafana dashboard.
#
#   scripts/check-observability.sh           # offline, with promtool
#   scripts/check-observability.sh --live    # and against both services running
#
# 1. promtool check config on prometheus.yml (and the rule files it names);
# 2. promtool check rules on alerts.yml, promtool test rules on alerts.test.yml, and every
#    alert has a test where it fires and one where it stays quiet;
# 3. every query of every dashboard, Grafana's variables given sample values, wrapped as a
#    recording rule through promtool check rules (Grafana itself is not installable here);
# 4. with --live: a RabbitMQ node of its own (free ports, rabbitmq_prometheus on; the
#    machine's broker is left as it is) and both services against it on free ports with state of
#    their own (scripts/lib/stack.sh). Every metric the alerts and the dashboards read must be
#    in the first scrape of the services (before any traffic: docs/contract.md §5 wants every
#    named metric from start) or of the plugin's two endpoints that prometheus.yml scrapes;
#    only `up`, Prometheus's own, is not looked for. And the dead-letter alert's selector
#    must find both dead-letter queues the services declared. An alert on a name nobody
#    exposes would never fire.
#
# Needs: promtool (`apt-get install prometheus`), python3 with PyYAML; with --live,
# rabbitmq-server and what scripts/lib/stack.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=deploy/observability
CHECKS=scripts/observability_checks.py
DASHBOARDS=("$DIR"/grafana/dashboards/*.json)
LIVE=0
case "${1:-}" in
  --live) LIVE=1 ;;
  "") ;;
  *) echo "usage: $0 [--live]" >&2; exit 2 ;;
esac

log() { printf '\n==> %s\n' "$*"; }

for tool in promtool python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 1; }
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

log "Prometheus configuration"
promtool check config "$DIR/prometheus/prometheus.yml"

log "alert rules and their unit tests"
promtool check rules "$DIR/prometheus/alerts.yml"
promtool test rules "$DIR/prometheus/alerts.test.yml"
python3 "$CHECKS" tested "$DIR/prometheus/alerts.yml" "$DIR/prometheus/alerts.test.yml"
echo "every alert is tested firing and not firing"

log "dashboard queries as recording rules"
python3 "$CHECKS" dashboard-rules "${DASHBOARDS[@]}" >"$WORK/dashboard-rules.json"
promtool check rules "$WORK/dashboard-rules.json"

if [ "$LIVE" = 1 ]; then
  . scripts/lib/stack.sh
  stack_require rabbitmq-server
  RABBIT_DIR="$(mktemp -d)"
  RABBIT_LOG_DIR="$RABBIT_DIR/log"
  RABBIT_NODE="observability_$$@localhost"
  RABBIT_PLUGINS=rabbitmq_prometheus
  AMQP_PORT="$(stack_free_port)"
  RABBIT_DIST_PORT="$(stack_free_port)"
  BROKER_METRICS="http://127.0.0.1:$(stack_free_port)"
  RABBIT_CONF="prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = ${BROKER_METRICS##*:}"
  . scripts/lib/rabbitmq_node.sh
  STACK_AMQP_PORT="$AMQP_PORT"
  STACK_RABBITMQCTL=(rabbitmqctl -n "$RABBIT_NODE")
  stop_all() {
    local status=$?
    stack_stop || true
    rabbitmqctl -n "$RABBIT_NODE" -q stop >/dev/null 2>&1 || true
    rm -rf "$WORK" "$RABBIT_DIR"
    return "$status"
  }
  trap stop_all EXIT
  trap 'exit 130' INT TERM

  log "build"
  stack_build

  log "a RabbitMQ node with rabbitmq_prometheus"
  start_rabbit

  log "metric names against the first scrape of both services and of the broker"
  stack_start observability
  curl -fsS "$ORDER_URL/metrics" >"$WORK/exposed.txt"
  curl -fsS "$INVENTORY_URL/metrics" >>"$WORK/exposed.txt"
  curl -fsS "$BROKER_METRICS/metrics" >>"$WORK/exposed.txt"
  # A queue shows in the plugin's figures once the broker has collected its statistics
  # (every 5 s by default), so the dead-letter queues the services declared are waited for.
  dead_letter_queues_seen() {
    local queue
    for queue in inventory-service.order-events.dlq order-service.inventory-events.dlq; do
      grep -q "^rabbitmq_detailed_queue_messages{.*queue=\"$queue\"" "$WORK/queues.txt" || return 1
    done
  }
  for _ in $(seq 1 60); do
    curl -fsS "$BROKER_METRICS/metrics/detailed?family=queue_coarse_metrics" >"$WORK/queues.txt"
    dead_letter_queues_seen && break
    sleep 0.5
  done
  dead_letter_queues_seen || {
    echo "error: rabbitmq_detailed_queue_messages shows no dead-letter queue of the services" >&2
    exit 1
  }
  echo "the dead-letter alert's metric shows both dead-letter queues"
  cat "$WORK/queues.txt" >>"$WORK/exposed.txt"
  python3 "$CHECKS" names "$WORK/exposed.txt" "$DIR/prometheus/alerts.yml" "${DASHBOARDS[@]}"
  echo "every metric read by the alerts and the dashboards is exposed"
fi
