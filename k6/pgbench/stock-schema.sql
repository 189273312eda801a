-- Scratch table for pgbench script (b): the columns and CHECK of inventory-service's `products`
-- table (migrations/inventory-service/0001_products_and_deductions.sql) that the hot update
-- touches. Kept standalone so the benchmark does not depend on migrations still being written.
CREATE TABLE products (
    product_id BIGINT NOT NULL,
    name       TEXT NOT NULL,
    stock      BIGINT NOT NULL,
    version    BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT products_pkey PRIMARY KEY (product_id),
    CONSTRAINT products_stock_non_negative CHECK (stock >= 0)
);
-- Stock large enough that no 20 s run can exhaust it (every update must really update).
INSERT INTO products (product_id, name, stock) VALUES (1, 'hot product', 1000000000000);
