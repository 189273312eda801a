# A RabbitMQ node of a script's own, on ports of its own, so the machine's broker is never
# touched. Sourced by soak.sh and check-observability.sh:
#
#   RABBIT_NODE=name@localhost RABBIT_DIR=/tmp/... RABBIT_LOG_DIR=... AMQP_PORT=N
#   RABBIT_PLUGINS=rabbitmq_prometheus     # optional, comma-separated
#   RABBIT_CONF="prometheus.tcp.port = M"  # optional, more rabbitmq.conf lines
#   . scripts/lib/rabbitmq_node.sh
#   start_rabbit                           # returns once the node has started
#   rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q stop
#
# The Erlang distribution port is RABBIT_DIST_PORT, default AMQP_PORT + 1. RabbitMQ refuses
# to run as root, so when we are root its files belong to the rabbitmq user.

rabbit_env() {
  env RABBITMQ_NODENAME="$RABBIT_NODE" RABBITMQ_CONFIG_FILE="$RABBIT_DIR/rabbitmq.conf" \
    RABBITMQ_DIST_PORT="${RABBIT_DIST_PORT:-$((AMQP_PORT + 1))}" RABBITMQ_MNESIA_BASE="$RABBIT_DIR/mnesia" \
    RABBITMQ_LOG_BASE="$RABBIT_LOG_DIR" RABBITMQ_ENABLED_PLUGINS_FILE="$RABBIT_DIR/enabled_plugins" \
    RABBITMQ_PID_FILE="$RABBIT_DIR/pid" "$@"
}

start_rabbit() {
  mkdir -p "$RABBIT_DIR" "$RABBIT_LOG_DIR"
  printf 'listeners.tcp.local = 127.0.0.1:%s\n%s\n' "$AMQP_PORT" "${RABBIT_CONF:-}" \
    > "$RABBIT_DIR/rabbitmq.conf"
  echo "[${RABBIT_PLUGINS:-}]." > "$RABBIT_DIR/enabled_plugins"
  [ "$(id -u)" = 0 ] && chown -R rabbitmq:rabbitmq "$RABBIT_DIR" "$RABBIT_LOG_DIR"
  rabbit_env rabbitmq-server -detached
  for _ in $(seq 1 120); do
    rabbitmqctl -n "$RABBIT_NODE" -q status >/dev/null 2>&1 && break
    sleep 1
  done
  rabbitmqctl -n "$RABBIT_NODE" -q await_startup
}
