-- Orders, the durable record of each idempotency token's outcome, and the transactional outbox.

CREATE TABLE orders (
    order_id         uuid        NOT NULL,
    user_id          bigint      NOT NULL,
    items            jsonb       NOT NULL,
    amount           numeric(14, 2) NOT NULL,
    status           text        NOT NULL DEFAULT 'PENDING',
    rejection_reason text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orders_pkey PRIMARY KEY (order_id),
    CONSTRAINT orders_user_id_positive CHECK (user_id > 0),
    CONSTRAINT orders_amount_not_negative CHECK (amount >= 0),
    CONSTRAINT orders_status_known CHECK (status IN ('PENDING', 'CONFIRMED', 'REJECTED', 'CANCELLED')),
    CONSTRAINT orders_rejection_reason_known CHECK (
        (status = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
        OR (status <> 'REJECTED' AND rejection_reason IS NULL)
    )
);

-- Newest first, overall and per user; the order id breaks ties inside one microsecond.
CREATE INDEX orders_newest_first ON orders (created_at DESC, order_id DESC);
CREATE INDEX orders_by_user_newest_first ON orders (user_id, created_at DESC, order_id DESC);
CREATE INDEX orders_pending_oldest_first ON orders (created_at) WHERE status = 'PENDING';

-- One row per used token, written in the order's own transaction: the unique key is what
-- guarantees one order per token even after Redis lost every key.
CREATE TABLE idempotency_keys (
    token           uuid        NOT NULL,
    fingerprint     text        NOT NULL,
    order_id        uuid        NOT NULL,
    response_status smallint    NOT NULL,
    response_body   bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (token),
    CONSTRAINT idempotency_keys_order_fkey FOREIGN KEY (order_id) REFERENCES orders (order_id)
);

CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    event_id        uuid        NOT NULL,
    exchange        text        NOT NULL,
    routing_key     text        NOT NULL,
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}',
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_status_known CHECK (status IN ('pending', 'sent', 'dead'))
);

CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX outbox_dead ON outbox (id) WHERE status = 'dead';
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE status = 'sent';

-- Wake the relay on commit instead of making it poll. One notification per statement,
-- and PostgreSQL folds identical notifications of one transaction into one.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
