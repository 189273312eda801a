-- A restock may add as much as a product may start with (1,000,000,000 units): a shipment of
-- more than a million units is one restock, not many. The bound keeps any sum of restocks far
-- from bigint's limit; the service checks the same range before it writes.
ALTER TABLE restocks DROP CONSTRAINT restocks_quantity_range;
ALTER TABLE restocks ADD CONSTRAINT restocks_quantity_range
    CHECK (quantity BETWEEN 1 AND 1000000000);
