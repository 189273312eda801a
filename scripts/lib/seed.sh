# Products 1..1000 with stock enough for any run, written straight into inventory's database,
# so that nothing but the orders is counted: k6's create-orders then runs with SEEDED=1.
# Sourced by compare-builds.sh (moderate), profile.sh and round-trips.sh:
#
#   . scripts/lib/seed.sh
#   seed_benchmark_products "postgres://…/<inventory database>"

seed_benchmark_products() { # inventory database URL
  psql "$1" -qXAtc "
    INSERT INTO products (product_id, name, stock)
    SELECT id, 'Benchmark product ' || id, 1000000000 FROM generate_series(1, 1000) AS id
    ON CONFLICT DO NOTHING" >/dev/null
}
