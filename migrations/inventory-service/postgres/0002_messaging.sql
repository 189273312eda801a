-- The saga's side of inventory: what happened to each order's stock, the transactional
-- outbox, and the ids of consumed messages.

-- One row per order inventory has heard of. APPLIED: stock deducted; REJECTED: nothing
-- deducted; RELEASED: deducted, then given back; CANCELLED: the cancellation came first (a
-- tombstone), so nothing was or will be deducted.
CREATE TABLE reservations (
    order_id         uuid        NOT NULL,
    state            text        NOT NULL,
    items            jsonb       NOT NULL DEFAULT '[]',
    rejection_reason text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT reservations_pkey PRIMARY KEY (order_id),
    CONSTRAINT reservations_state_known CHECK (state IN ('APPLIED', 'REJECTED', 'RELEASED', 'CANCELLED')),
    CONSTRAINT reservations_rejection_reason_known CHECK (
        (state = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
        OR (state <> 'REJECTED' AND rejection_reason IS NULL)
    )
);

-- The same shape as order-service's outbox: `platform::relay` publishes both.
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

CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

CREATE TABLE processed_messages (
    message_id   uuid        NOT NULL,
    kind         text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT processed_messages_pkey PRIMARY KEY (message_id)
);

CREATE INDEX processed_messages_oldest_first ON processed_messages (processed_at);
