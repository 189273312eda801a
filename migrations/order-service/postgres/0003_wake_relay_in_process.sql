-- The relay is now woken in-process right after each commit that wrote outbox rows.
-- NOTIFY made PostgreSQL take one global lock at the commit of every order, which serialised
-- the commits behind each other's WAL flush.
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
