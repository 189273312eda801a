#!/usr/bin/env bash
# Runs one function of scripts/lib/backing.sh for scripts/chaos/run.py, which passes the
# instances' ports, node name and directories in the environment (PG_PORT, REDIS_PORT,
# AMQP_PORT, RABBIT_NODE, work, out):
#
#   scripts/chaos/backing-ctl.sh start_postgres
#   scripts/chaos/backing-ctl.sh rabbit_env rabbitmqctl -n "$RABBIT_NODE" -q stop_app
set -euo pipefail
. "$(dirname "$0")/../lib/backing.sh"
"$@"
