# Private PostgreSQL, Redis and RabbitMQ instances on ports of a script's own, so the machine's
# own servers are never touched. Sourced by soak.sh and scripts/chaos/backing-ctl.sh:
#
#   PG_PORT=N REDIS_PORT=N AMQP_PORT=N RABBIT_NODE=name@localhost
#   work=/tmp/...   # data: $work/pg (PostgreSQL), $work/rabbit (RabbitMQ), Redis' pid file
#   out=...         # logs: $out/redis.log, $out/rabbitmq/
#   . scripts/lib/backing.sh
#   PG_EXTRA_OPTS="-c name=value ..."   # optional: more server settings
#   init_postgres; start_postgres; start_redis; start_rabbit
#   stop_postgres fast|immediate; stop_redis; rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q stop
#
# PostgreSQL and RabbitMQ refuse to run as root: when we are root they run as their own users.

as_user() {
  local user="$1"; shift
  if [ "$(id -u)" = 0 ]; then runuser -u "$user" -- "$@"; else "$@"; fi
}
PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
PGBIN="${PGBIN:-$(dirname "$(command -v pg_ctl)")}"

init_postgres() {
  mkdir -p "$work/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$work/pg"
  as_user postgres "$PGBIN/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
}
start_postgres() {
  as_user postgres "$PGBIN/pg_ctl" -D "$work/pg" -l "$work/pg/server.log" -w \
    -o "-p $PG_PORT -k $work/pg -c listen_addresses=127.0.0.1 -c max_connections=200 ${PG_EXTRA_OPTS:-}" \
    start >/dev/null
}
stop_postgres() { # fast | immediate
  as_user postgres "$PGBIN/pg_ctl" -D "$work/pg" -m "${1:-fast}" -w stop >/dev/null
}

start_redis() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$work" --pidfile "$work/redis.pid" --logfile "$out/redis.log"
  for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "private Redis did not start" >&2; return 1
}
stop_redis() {
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
}

RABBIT_DIR="${RABBIT_DIR:-$work/rabbit}"
RABBIT_LOG_DIR="${RABBIT_LOG_DIR:-$out/rabbitmq}"
. "$(dirname "${BASH_SOURCE[0]}")/rabbitmq_node.sh"
