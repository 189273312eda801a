# A Redis Cluster of a script's own: three masters and three replicas on free ports, data in
# a scratch directory, the way the tests start theirs (testkit's PrivateRedisCluster). Source
# it, then:
#
#   redis_cluster_start DIR      # sets REDIS_CLUSTER_URLS and CLUSTER_PORTS; PIDs in CLUSTER_PID
#   redis_cluster_master_of KEY  # prints the port of the master serving KEY's slot
#   redis_cluster_kill PORT      # SIGKILL
#   redis_cluster_restart PORT   # back with its cluster file: it rejoins as a replica
#   redis_cluster_ok_after PORT  # waits until KEY's slot moved off PORT and the cluster is ok
#   redis_cluster_stop
#
# cluster-node-timeout is 1000 ms, so a failover takes a few seconds (Redis's default, 15 s,
# needs REDIS_CLUSTER_WAIT_MS of 20000 or more).

CLUSTER_PORTS=() CLUSTER_BUS=()
declare -A CLUSTER_PID

_cluster_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_cluster_spawn() { # index
  local port=${CLUSTER_PORTS[$1]} dir="$CLUSTER_DIR/${CLUSTER_PORTS[$1]}"
  mkdir -p "$dir"
  redis-server --port "$port" --cluster-port "${CLUSTER_BUS[$1]}" --cluster-enabled yes \
    --cluster-config-file nodes.conf --cluster-node-timeout 1000 --bind 127.0.0.1 \
    --save "" --appendonly no --dir "$dir" --repl-diskless-sync-delay 0 \
    >"$dir/redis.log" 2>&1 &
  CLUSTER_PID[$port]=$!
  for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "cluster node :$port did not start" >&2
  return 1
}

redis_cluster_start() { # scratch directory
  CLUSTER_DIR="$1"
  local i addresses=()
  for i in 0 1 2 3 4 5; do
    CLUSTER_PORTS+=("$(_cluster_free_port)")
    CLUSTER_BUS+=("$(_cluster_free_port)")
    _cluster_spawn "$i"
    addresses+=("127.0.0.1:${CLUSTER_PORTS[$i]}")
  done
  redis-cli --cluster create "${addresses[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
  for _ in $(seq 1 100); do
    redis_cluster_healthy && break
    sleep 0.2
  done
  redis_cluster_healthy || { echo "the Redis Cluster did not become ok" >&2; return 1; }
  REDIS_CLUSTER_URLS="$(for i in 0 1 2 3 4 5; do printf 'redis://127.0.0.1:%s,' "${CLUSTER_PORTS[$i]}"; done)"
  REDIS_CLUSTER_URLS="${REDIS_CLUSTER_URLS%,}"
}

redis_cluster_healthy() { # every live node ok, three replicas in sync
  local port synced=0
  for port in "${!CLUSTER_PID[@]}"; do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || return 1
    redis-cli -p "$port" info replication 2>/dev/null | grep -q 'master_link_status:up' \
      && synced=$((synced + 1))
  done
  [ "$synced" -eq 3 ]
}

redis_cluster_master_of() { # key; prints nothing when no node that answers knows
  local slot port master
  for port in "${!CLUSTER_PID[@]}"; do
    slot="$(redis-cli -p "$port" cluster keyslot "$1" 2>/dev/null)" || continue
    # CLUSTER NODES: id, ip:port@bus, flags, master, ping, pong, epoch, link, slot ranges.
    master="$(redis-cli -p "$port" cluster nodes 2>/dev/null | awk -v slot="$slot" '
      $3 ~ /master/ && $3 !~ /fail/ {
        for (i = 9; i <= NF; i++) {
          n = split($i, range, "-"); if (n == 1) range[2] = range[1]
          if (range[1] + 0 <= slot && slot <= range[2] + 0) { split($2, at, "[:@]"); print at[2]; exit }
        }
      }')"
    if [ -n "$master" ]; then
      echo "$master"
      return
    fi
  done
}

redis_cluster_kill() { # port (in the shell that started the cluster: it forgets the node)
  [ -n "$1" ] && [ -n "${CLUSTER_PID[$1]:-}" ] || { echo "no cluster node on port '$1'" >&2; return 1; }
  kill -KILL "${CLUSTER_PID[$1]}" 2>/dev/null || true
  wait "${CLUSTER_PID[$1]}" 2>/dev/null || true
  unset "CLUSTER_PID[$1]"
}

redis_cluster_restart() { # port
  local i
  for i in 0 1 2 3 4 5; do
    if [ "${CLUSTER_PORTS[$i]}" = "$1" ]; then _cluster_spawn "$i"; fi
  done
}

redis_cluster_ok_after() { # key port: until another node serves key's slot and the cluster is ok
  local master
  for _ in $(seq 1 300); do
    master="$(redis_cluster_master_of "$1")"
    if [ -n "$master" ] && [ "$master" != "$2" ] \
      && redis-cli -p "$master" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

redis_cluster_stop() {
  local port
  for port in "${!CLUSTER_PID[@]}"; do
    kill -KILL "${CLUSTER_PID[$port]}" 2>/dev/null || true
  done
}
