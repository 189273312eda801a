-- Ids of consumed messages, recorded in the transaction of the change each caused.
CREATE TABLE processed_messages (
    message_id   uuid        NOT NULL,
    kind         text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT processed_messages_pkey PRIMARY KEY (message_id)
);

CREATE INDEX processed_messages_oldest_first ON processed_messages (processed_at);
