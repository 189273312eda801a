-- The end user who took each used token (the JWT's `sub`; NULL with identity off), committed
-- with its outcome: the binding of token to taker must survive Redis losing its keys, or
-- another user could replay someone else's order through a forgotten token.
ALTER TABLE idempotency_keys
    ADD COLUMN taker bigint,
    ADD CONSTRAINT idempotency_keys_taker_positive CHECK (taker > 0);
