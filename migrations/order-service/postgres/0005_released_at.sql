-- When inventory was last known to hold nothing for a CANCELLED order: its inventory.released
-- arrived, or reconciliation found the reservation released, tombstoned or rejected. Until then
-- reconciliation keeps asking, and sends the cancellation again while stock is still held.
ALTER TABLE orders ADD COLUMN released_at timestamptz;

-- What reconciliation scans: cancelled orders whose stock is not known to be back, oldest
-- cancellation first (a cancelled order's updated_at is the moment it was cancelled).
CREATE INDEX orders_cancelled_unreleased ON orders (updated_at)
    WHERE status = 'CANCELLED' AND released_at IS NULL;
