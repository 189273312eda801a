#!/usr/bin/env bash
# Checks the offline query data in .sqlx/ against the migrations: scratch databases are
# created and migrated from scratch, then every `sqlx::query!` of the workspace is compiled
# against them. With --write, rewrites .sqlx/ instead (run it after changing a statement or
# a migration, and commit the result).
#
# Each crate names its database in its sqlx.toml, with names of their own so that the
# ORDER_DATABASE_URL / INVENTORY_DATABASE_URL of scripts/run-local.sh never reach the macros:
# SQLX_ORDER_DATABASE_URL (order-service), SQLX_INVENTORY_DATABASE_URL (inventory-service),
# SQLX_PLATFORM_DATABASE_URL (platform, whose
# statements touch only the tables both services have), and for the MySQL statement crates
# SQLX_PLATFORM_MYSQL_DATABASE_URL (stores/platform-mysql) and SQLX_ORDER_MYSQL_DATABASE_URL
# (stores/order-mysql), both checked against the orders schema on MariaDB
# (sqlx_check_mysql_orders, built from migrations/order-service/mysql/ with the `mariadb`
# client), and SQLX_INVENTORY_MYSQL_DATABASE_URL (stores/inventory-mysql, against
# sqlx_check_mysql_inventory). SQLX_CHECK_SERVER overrides the PostgreSQL server the scratch
# databases live on (default postgres://postgres@127.0.0.1:5432), SQLX_CHECK_MYSQL_SERVER the
# MariaDB / MySQL one, as mysql://user[:password]@host[:port] (default
# mysql://root@127.0.0.1:3306: a scratch server's root, no password).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"

server="${SQLX_CHECK_SERVER:-postgres://postgres@127.0.0.1:5432}"
export SQLX_ORDER_DATABASE_URL="$server/sqlx_check_orders"
export SQLX_INVENTORY_DATABASE_URL="$server/sqlx_check_inventory"
export SQLX_PLATFORM_DATABASE_URL="$SQLX_ORDER_DATABASE_URL"
mysql_server="${SQLX_CHECK_MYSQL_SERVER:-mysql://root@127.0.0.1:3306}"
export SQLX_PLATFORM_MYSQL_DATABASE_URL="$mysql_server/sqlx_check_mysql_orders"
export SQLX_ORDER_MYSQL_DATABASE_URL="$SQLX_PLATFORM_MYSQL_DATABASE_URL"
export SQLX_INVENTORY_MYSQL_DATABASE_URL="$mysql_server/sqlx_check_mysql_inventory"
# The CLI wants a URL of its own before it runs the build; the macros use the ones above.
export DATABASE_URL="$SQLX_ORDER_DATABASE_URL"
# This script alone compiles the statements against live databases.
export SQLX_OFFLINE=false

command -v sqlx >/dev/null || {
  echo "sqlx-cli is missing: cargo install sqlx-cli --version 0.9.0 --locked --no-default-features --features postgres,rustls,sqlx-toml" >&2
  exit 1
}
scratch() { # service url
  sqlx database drop -y --database-url "$2" >/dev/null
  sqlx database create --database-url "$2"
  sqlx migrate run --source "migrations/$1/postgres" --database-url "$2" >/dev/null
}
scratch order-service "$SQLX_ORDER_DATABASE_URL"
scratch inventory-service "$SQLX_INVENTORY_DATABASE_URL"
# The MySQL schemas, applied in order with the server's own client (the sqlx CLI here speaks
# PostgreSQL only; the macros connect by themselves), into a database created as the services
# create theirs: binary, NO PAD collation.
scratch_mysql() { # service database
  local authority="${mysql_server#*://}"
  local credentials="${authority%%@*}" address="${authority#*@}"
  local client=(mariadb --host "${address%:*}" --user "${credentials%%:*}")
  if [[ "$address" == *:* ]]; then client+=(--port "${address##*:}"); fi
  if [[ "$credentials" == *:* ]]; then client+=(--password="${credentials#*:}"); fi
  "${client[@]}" -e "DROP DATABASE IF EXISTS \`$2\`;
    CREATE DATABASE \`$2\` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
  for migration in migrations/"$1"/mysql/*.sql; do
    "${client[@]}" "$2" < "$migration"
  done
}
scratch_mysql order-service sqlx_check_mysql_orders
scratch_mysql inventory-service sqlx_check_mysql_inventory

if [ "$mode" = --write ]; then
  cargo sqlx prepare --workspace -- --all-targets
else
  cargo sqlx prepare --workspace --check -- --all-targets
fi
