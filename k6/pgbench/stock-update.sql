-- pgbench script (b): the bare conditional stock update of inventory-service on one hot row
-- (product 1), one statement per transaction. This is PostgreSQL's own limit for deducting
-- from a single product on this machine: every transaction waits for the previous one's row
-- lock and commit (WAL flush), so it measures the serialised commit rate of one row, whatever
-- the number of clients. `POST /deductions` does more per deduction (a Redis lock, reading the
-- row, the version check, a `deductions` row) but shares one commit among a whole batch, so it
-- can pass this rate, which no design with one commit per deduction can.
UPDATE products SET stock = stock - 1, version = version + 1 WHERE product_id = 1 AND stock >= 1;
