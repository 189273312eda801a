# CPU time used by the processes of the stack, grouped by what they are. Sourced by
# cpu-per-order.sh and compare-builds.sh:
#
#   . scripts/lib/cpu.sh
#   before="$(cpu_snapshot)"; …; after="$(cpu_snapshot)"
#   cpu_per_order "$before" "$after" ORDERS        # a table: group, CPU seconds, CPU ms/order
#   cpu_own_ms "$before" "$after" ORDERS           # ms per order: both services + PostgreSQL + Redis
#
# Reads utime + stime of every process from /proc. Only meaningful on a machine where these
# are the only busy processes. Linux only.

CPU_TICKS="$(getconf CLK_TCK)"

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
  done | awk '
    $1 ~ /^(postgres|postmaster)$/ { g = "postgresql" }
    $1 ~ /^(beam\.smp|erl_child_setup|epmd|inet_gethost)$/ { g = "rabbitmq" }
    $1 == "redis-server" { g = "redis" }
    $1 == "order-service" { g = "order-service" }
    $1 ~ /^inventory-servi/ { g = "inventory-service" }
    g != "" { t[g] += $2 + $3; g = "" }
    END { for (k in t) print k, t[k] }' | sort
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
