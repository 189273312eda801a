-- How many times handling each message failed (an error, not contention), counted by the
-- consumer itself: the broker's count also grows whenever a channel holding the message
-- closes (a crash, a lost connection), so it cannot tell a message that keeps failing from
-- one whose consumers kept dying. Written outside the failed transaction, which rolled back.
CREATE TABLE message_failures (
    message_id uuid        NOT NULL,
    failures   integer     NOT NULL CHECK (failures > 0),
    last_error text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT message_failures_pkey PRIMARY KEY (message_id)
);

CREATE INDEX message_failures_oldest_first ON message_failures (updated_at);
