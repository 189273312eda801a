-- When reconciliation last looked at a PENDING order. Kept apart from updated_at, which only
-- changes with the order itself; a claimed order is not looked at again for a period.
ALTER TABLE orders ADD COLUMN reconciled_at timestamptz;
