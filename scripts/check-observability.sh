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
# 4. with --live: both services started on free ports with state of their own
#    (scripts/lib/stack.sh), and every metric the alerts and the dashboards read must be in
#    their first scrape, before any traffic (SPEC §5: every named metric exists from start;
#    an alert on a name nobody exposes would never fire). `up` is Prometheus's own and
#    `rabbitmq_*` the broker plugin's, so those are not looked for.
#
# Needs: promtool (`apt-get install prometheus`), python3 with PyYAML; with --live, what
# scripts/lib/stack.sh needs.
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
  trap 'stack_stop; rm -rf "$WORK"' EXIT
  trap 'exit 130' INT TERM

  log "build"
  stack_build
  log "metric names against both services' first scrape"
  stack_start observability
  curl -fsS "$ORDER_URL/metrics" >"$WORK/exposed.txt"
  curl -fsS "$INVENTORY_URL/metrics" >>"$WORK/exposed.txt"
  python3 "$CHECKS" names "$WORK/exposed.txt" "$DIR/prometheus/alerts.yml" "${DASHBOARDS[@]}"
  echo "every metric read by the alerts and the dashboards is exposed"
fi
