-- `POST /deductions` is judged in Rust now, by the stock engine that also judges orders'
-- reservations (inventory-service/src/stock/engine.rs): a batch reads, is judged in memory,
-- and writes everything in one statement, its own transaction. Plain SQL has no way to undo
-- such a statement when one of its guards finds fewer rows than were decided; this is that
-- way, and nothing more: it raises a serialization failure (40001), which rolls the statement
-- back and which the caller retries.
CREATE FUNCTION serialization_failure(message text) RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', message USING ERRCODE = 'serialization_failure';
END;
$$;

-- apply_deductions (0004) is no longer called by this release. Instances of the previous
-- release still call it while a rolling update replaces them, so it stays in this schema;
-- the release after this one drops it.
COMMENT ON FUNCTION apply_deductions(bigint[], text[], text[], jsonb[], bigint[], smallint,
    bytea[], smallint, bytea[], smallint, bytea[])
    IS 'Not called since migration 0005; kept for the previous release during a rolling update.';
