-- The payment window (docs/contract.md §3.1.1): a reserved order may wait for its payment
-- (AWAITING_PAYMENT) until payment_due_at, then is confirmed, cancelled or EXPIRED.
-- Expand only: the statuses widen and the column is nullable, so the release before this one
-- runs on this schema (it never writes the new statuses; the window stays off until every
-- instance runs this release, decision 0057).
ALTER TABLE orders
    DROP CONSTRAINT orders_status_known,
    ADD CONSTRAINT orders_status_known CHECK (status IN (
        'PENDING', 'AWAITING_PAYMENT', 'CONFIRMED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    -- Set once, when the order starts to wait, and kept whatever comes after; NULL on an order
    -- that never waited.
    ADD COLUMN payment_due_at timestamptz,
    ADD CONSTRAINT orders_awaiting_payment_has_a_due_time CHECK (
        status <> 'AWAITING_PAYMENT' OR payment_due_at IS NOT NULL);

-- What the expiry loop scans: orders still waiting, earliest due first.
CREATE INDEX orders_awaiting_payment_due ON orders (payment_due_at)
    WHERE status = 'AWAITING_PAYMENT';

-- What reconciliation scans: orders whose stock was given back (cancelled or expired) and not
-- yet known to be back. It serves the previous release's query on CANCELLED alone too (its
-- predicate implies this one), so the index it replaces can go in the same step.
CREATE INDEX orders_given_back_unreleased ON orders (updated_at)
    WHERE status IN ('CANCELLED', 'EXPIRED') AND released_at IS NULL;
DROP INDEX orders_cancelled_unreleased;
