# CPU time used by the processes of the stack, grouped by what they are. Sourced by
# cpu-per-order.sh and compare-builds.sh:
#
#   . scripts/lib/cpu.sh
#   before="$(cpu_snapshot)"; …; after="$(cpu_snapshot)"
#   cpu_per_order "$before" "$after" ORDERS        # a table: group, CPU seconds, CPU ms/order
#   cpu_own_ms "$before" "$after" ORDERS           # ms per order: both services + PostgreSQL + Redis
#
#   before="$(switch_snapshot)"; …; after="$(switch_snapshot)"
#   switches_per_order "$before" "$after" ORDERS GROUP   # a count: how often its threads slept
#
# Reads utime + stime of every process, and the context switches of every thread, from /proc.
# Only meaningful on a machine where these are the only busy processes. Linux only.

CPU_TICKS="$(getconf CLK_TCK)"

# The group a process belongs to, by its name (comm, at most 15 characters), for awk.
CPU_GROUPS_AWK='
  function group_of(name) {
    if (name ~ /^(postgres|postmaster)$/) return "postgresql"
    if (name ~ /^(beam\.smp|erl_child_setup|epmd|inet_gethost)$/) return "rabbitmq"
    if (name == "redis-server") return "redis"
    if (name == "order-service") return "order-service"
    if (name ~ /^inventory-servi/) return "inventory-service"
    return ""
  }'

# Prints "<group> <ticks>" for every process group of interest: PostgreSQL (all backends and
# helpers), RabbitMQ (the Erlang VM), Redis, the two services.
cpu_snapshot() {
  local stat line name rest
  for stat in /proc/[0-9]*/stat; do
    # The name sits in parentheses and may contain spaces; the counters follow it.
    line="$(cat "$stat" 2>/dev/null)" || continue
    name="${line#*(}"; name="${name%%)*}"
    rest="${line##*) }"
    # shellcheck disable=SC2086
    set -- $rest
    echo "$name ${12} ${13}"
  done | awk "$CPU_GROUPS_AWK"'
    { g = group_of($1) }
    g != "" { t[g] += $2 + $3 }
    END { for (k in t) print k, t[k] }' | sort
}

# Prints "<group> <switches>": voluntary and involuntary context switches of every thread of
# every process of interest. A thread that waits for a socket, a lock or a timer and is woken
# again counts one: at a moderate rate, where work arrives one request at a time, this counts
# the wake-ups an order costs. A thread that ends between two snapshots takes its whole count
# out of the difference (a closed PostgreSQL connection's backend): measure while the stack
# keeps its connections. grep reads the files, not awk: a thread that ends between the glob
# and the read must be skipped (grep then exits 2, which pipefail must not see), and awk
# stops at a file it cannot open.
switch_snapshot() {
  { grep -H '_ctxt_switches:' /proc/[0-9]*/task/[0-9]*/status 2>/dev/null || true; } | awk -F: "$CPU_GROUPS_AWK"'
    {
      split($1, part, "/"); pid = part[3]
      if (!(pid in group)) {
        name = ""; getline name < ("/proc/" pid "/comm"); close("/proc/" pid "/comm")
        group[pid] = group_of(name)
      }
      if (group[pid] != "") t[group[pid]] += $3
    }
    END { for (k in t) print k, t[k] }' | sort
}

# One group's context switches per order.
switches_per_order() { # before after orders group
  join <(echo "$1") <(echo "$2") | awk -v n="$3" -v g="$4" '
    $1 == g { s += $3 - $2 } END { printf "%.1f\n", s / n }'
}

cpu_per_order() { # before after orders
  join <(echo "$1") <(echo "$2") | awk -v hz="$CPU_TICKS" -v n="$3" '
    { s = ($3 - $2) / hz; printf "%-18s %12.2f %14.2f\n", $1, s, 1000 * s / n }'
}

# One group's CPU ms per order.
cpu_group_ms() { # before after orders group
  join <(echo "$1") <(echo "$2") | awk -v hz="$CPU_TICKS" -v n="$3" -v g="$4" '
    $1 == g { s += ($3 - $2) / hz } END { printf "%.2f\n", 1000 * s / n }'
}

# The figure issue targets compare: our own processes, RabbitMQ and the load generator aside.
cpu_own_ms() { # before after orders
  join <(echo "$1") <(echo "$2") | awk -v hz="$CPU_TICKS" -v n="$3" '
    $1 != "rabbitmq" { s += ($3 - $2) / hz } END { printf "%.2f\n", 1000 * s / n }'
}
