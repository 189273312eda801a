-- The hot row of pgbench script (b), in a database that has inventory-service's migrations
-- (scripts/bench.sh applies them, as for script (a)). Stock large enough that no 20 s run can
-- exhaust it: every update must really update.
INSERT INTO products (product_id, name, stock) VALUES (1, 'hot product', 1000000000000);
