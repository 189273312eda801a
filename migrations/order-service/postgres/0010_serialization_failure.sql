-- Raised by a statement that writes a whole settled batch at once when one of its guards finds
-- a row changed since the batch read it: the statement undoes itself and the consumer judges
-- the batch again (SQLSTATE 40001, which the services treat as contention).
CREATE FUNCTION serialization_failure(message text) RETURNS boolean
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', message USING ERRCODE = 'serialization_failure';
END;
$$;
