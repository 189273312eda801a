-- order-service schema for MariaDB 10.6+ and MySQL 8.0.16+ (CHECK constraints are enforced
-- from 8.0.16 on; earlier MySQL parses and ignores them).
--
-- The schema as it stands after every PostgreSQL migration of ../postgres (0001 to 0010): a
-- fresh MariaDB/MySQL database starts here, with no history to replay. Every table, column (in
-- the same order), default, key, CHECK and index is PostgreSQL's, under the same name (primary
-- keys aside: see Keys below): the code matches on constraint names.
--
-- Collation: every table is utf8mb4 with a binary, NO PAD collation, so text compares byte by
-- byte and 'abc', 'ABC' and 'abc ' are three values, as in PostgreSQL. The servers' default
-- collations are case-insensitive and PAD SPACE, which would make them one key. MariaDB spells
-- it utf8mb4_nopad_bin; MySQL 8 has no such name and spells it utf8mb4_0900_bin (also binary
-- and NO PAD): on MySQL 8 replace `utf8mb4_nopad_bin` by `utf8mb4_0900_bin` throughout.
--
-- What the sessions are assumed to be (platform/src/storage/mysql.rs sets them): time_zone
-- '+00:00', so every DATETIME(6) below holds UTC; a strict sql_mode, so an out-of-range or
-- too-long value is refused rather than clipped. No `||` appears in a CHECK (the sessions run
-- with PIPES_AS_CONCAT).
--
-- Types, PostgreSQL -> here:
--   uuid          -> BINARY(16): the 16 bytes sqlx sends for a uuid::Uuid on MySQL. Compared
--                    byte-wise, as PostgreSQL orders uuids, so the tie-breaks by order_id keep
--                    their order.
--   timestamptz   -> DATETIME(6), UTC by the session's time_zone; microseconds as in
--                    PostgreSQL. Not TIMESTAMP, which ends in 2038.
--   now()         -> CURRENT_TIMESTAMP(6).
--                    DIFFERS: PostgreSQL's now() is the transaction's start, the same for every
--                    statement of a transaction; CURRENT_TIMESTAMP(6) is the statement's start.
--                    updated_at has no ON UPDATE clause: as in PostgreSQL, the statements set it.
--   jsonb         -> JSON. DIFFERS: on MariaDB, JSON is LONGTEXT (collation utf8mb4_bin) with
--                    a json_valid() CHECK named after the column, and keeps the text as written
--                    (jsonb drops whitespace, orders keys and keeps the last of a repeated key);
--                    MySQL 8's JSON is binary and normalises much like jsonb. No JSON column is
--                    compared or indexed here. Defaults '{}' / '[]' are expression defaults.
--   bytea         -> LONGBLOB.
--   numeric(p,s)  -> DECIMAL(p,s), same precision and scale.
--   text          -> VARCHAR(n) when keyed, indexed or length-checked, else TEXT.
--                    DIFFERS: TEXT holds at most 65,535 bytes (PostgreSQL text: 1 GB); a longer
--                    value is refused (strict mode), so the store bounds what it writes there.
--   boolean       -> BOOLEAN (TINYINT(1)).
--   bigint GENERATED ALWAYS AS IDENTITY -> BIGINT NOT NULL AUTO_INCREMENT.
--
-- Keys: DIFFERS: a primary key's name is always PRIMARY in MariaDB/MySQL (a name given to it
-- is ignored, with warning 1280), so each primary key below gives PostgreSQL's name (x_pkey)
-- in a comment; a duplicate key error names 'PRIMARY' (MySQL 8: '<table>.PRIMARY'), which
-- code matching on x_pkey reads as that table's x_pkey. Unique keys, foreign keys, CHECKs and
-- indexes keep PostgreSQL's names.
-- PostgreSQL's partial indexes (`WHERE status = ...`) do not exist here: each becomes a full
-- index, of the same name, led by the filtered column, so the same range is found by an
-- equality on it; it covers every row, not only the filtered ones.
--
-- Left out, as PostgreSQL mechanics or old releases:
-- - outbox_notify(), a trigger function (0001, dropped by 0003): pg_notify('outbox') on every
--   insert into outbox to wake the relay. The relay is woken in-process after each commit that
--   wrote outbox rows, on either backend.
-- - serialization_failure(message) (0010): a PL/pgSQL function that raised SQLSTATE 40001
--   (serialization_failure) with `message`. A statement writing a whole settled batch called it
--   from a CASE when one of its guards found a row changed since the batch read it (an order
--   that left PENDING, a message recorded meanwhile), so the statement undid itself and the
--   consumer judged the batch again as contention. The MySQL store does this in its own
--   statements instead: it runs the batch's statements in one transaction, compares each
--   guarded statement's affected rows with what was decided, and on a mismatch rolls the
--   transaction back and reports the same contention (no stored functions here).

-- Orders, the durable record of each idempotency token's outcome, and the transactional outbox.

CREATE TABLE orders (
    order_id         BINARY(16)     NOT NULL,
    user_id          BIGINT         NOT NULL,
    items            JSON           NOT NULL,
    amount           DECIMAL(14, 2) NOT NULL,
    -- VARCHAR, not TEXT: indexed (the partial indexes' replacements below). 32 is more than
    -- the longest known status (AWAITING_PAYMENT, 16). DIFFERS: a value longer than 32
    -- characters is refused by the column (error 1406, data too long) before
    -- orders_status_known sees it; any other unknown status is refused by the CHECK.
    status           VARCHAR(32)    NOT NULL DEFAULT 'PENDING',
    rejection_reason TEXT,
    created_at       DATETIME(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at       DATETIME(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- When reconciliation last looked at a PENDING order (0004). Kept apart from updated_at,
    -- which only changes with the order itself.
    reconciled_at    DATETIME(6),
    -- When inventory was last known to hold nothing for a CANCELLED or EXPIRED order (0005):
    -- until then reconciliation keeps asking.
    released_at      DATETIME(6),
    -- The payment window (0009, docs/contract.md §3.1.1): set once, when the order starts to
    -- wait (AWAITING_PAYMENT), and kept whatever comes after; NULL on an order that never
    -- waited.
    payment_due_at   DATETIME(6),
    PRIMARY KEY (order_id), -- PostgreSQL: orders_pkey
    CONSTRAINT orders_user_id_positive CHECK (user_id > 0),
    CONSTRAINT orders_amount_not_negative CHECK (amount >= 0),
    CONSTRAINT orders_status_known CHECK (status IN (
        'PENDING', 'AWAITING_PAYMENT', 'CONFIRMED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    -- As in PostgreSQL, REJECTED with a NULL reason passes: `NULL IN (...)` is unknown, and a
    -- CHECK refuses only what is false.
    CONSTRAINT orders_rejection_reason_known CHECK (
        (status = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
        OR (status <> 'REJECTED' AND rejection_reason IS NULL)
    ),
    CONSTRAINT orders_awaiting_payment_has_a_due_time CHECK (
        status <> 'AWAITING_PAYMENT' OR payment_due_at IS NOT NULL),
    -- Newest first, overall and per user; the order id breaks ties inside one microsecond.
    -- (MariaDB before 10.8 parses DESC and builds an ascending index, which it reads backwards
    -- for the same order; 10.8+ and MySQL 8 build it descending.)
    INDEX orders_newest_first (created_at DESC, order_id DESC),
    INDEX orders_by_user_newest_first (user_id, created_at DESC, order_id DESC),
    -- PostgreSQL: (created_at) WHERE status = 'PENDING'. Partial index -> led by status.
    INDEX orders_pending_oldest_first (status, created_at),
    -- What the expiry loop scans: orders still waiting, earliest due first.
    -- PostgreSQL: (payment_due_at) WHERE status = 'AWAITING_PAYMENT'. Partial -> led by status.
    INDEX orders_awaiting_payment_due (status, payment_due_at),
    -- What reconciliation scans: orders whose stock was given back (cancelled or expired) and
    -- not yet known to be back, oldest first.
    -- PostgreSQL: (updated_at) WHERE status IN ('CANCELLED', 'EXPIRED') AND released_at IS NULL.
    -- Partial -> led by status then released_at: one range per status (released_at IS NULL),
    -- each in updated_at order; the two are merged by a sort of what they found.
    INDEX orders_given_back_unreleased (status, released_at, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- One row per used token, written in the order's own transaction: the unique key is what
-- guarantees one order per token even after Redis lost every key.
CREATE TABLE idempotency_keys (
    token           BINARY(16)  NOT NULL,
    fingerprint     TEXT        NOT NULL,
    order_id        BINARY(16)  NOT NULL,
    response_status SMALLINT    NOT NULL,
    response_body   LONGBLOB    NOT NULL,
    created_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- The end user who took the token (the JWT's `sub`; NULL with identity off), committed with
    -- its outcome (0007): the binding must survive Redis losing its keys, or another user could
    -- replay someone else's order through a forgotten token.
    taker           BIGINT,
    PRIMARY KEY (token), -- PostgreSQL: idempotency_keys_pkey
    -- DIFFERS: InnoDB needs an index on a foreign key's columns and creates one, named after the
    -- constraint (idempotency_keys_order_fkey on order_id); PostgreSQL has no such index.
    -- InnoDB also checks the key row by row, PostgreSQL (NO ACTION) at the statement's end.
    CONSTRAINT idempotency_keys_order_fkey FOREIGN KEY (order_id) REFERENCES orders (order_id),
    CONSTRAINT idempotency_keys_taker_positive CHECK (taker > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- The transactional outbox, the same shape as inventory-service's: `platform::relay`
-- publishes both.
CREATE TABLE outbox (
    -- DIFFERS: GENERATED ALWAYS refused an explicit id; AUTO_INCREMENT accepts one (the
    -- services never give one).
    id              BIGINT      NOT NULL AUTO_INCREMENT,
    event_id        BINARY(16)  NOT NULL,
    exchange        TEXT        NOT NULL,
    routing_key     TEXT        NOT NULL,
    payload         JSON        NOT NULL,
    headers         JSON        NOT NULL DEFAULT ('{}'),
    -- VARCHAR, not TEXT: indexed. DIFFERS: over 32 characters is refused by the column (error
    -- 1406) rather than by outbox_status_known.
    status          VARCHAR(32) NOT NULL DEFAULT 'pending',
    attempts        INT         NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    last_error      TEXT,
    sent_at         DATETIME(6),
    created_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id), -- PostgreSQL: outbox_pkey
    CONSTRAINT outbox_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_status_known CHECK (status IN ('pending', 'sent', 'dead')),
    -- PostgreSQL: partial indexes WHERE status = 'pending' / 'dead' / 'sent'. Here each is led
    -- by status, so `status = 'pending' ORDER BY next_attempt_at, id` reads one range in order.
    INDEX outbox_due (status, next_attempt_at, id),
    INDEX outbox_dead (status, id),
    INDEX outbox_sent (status, sent_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- Ids of consumed messages, recorded in the transaction of the change each caused.
CREATE TABLE processed_messages (
    message_id   BINARY(16)  NOT NULL,
    kind         TEXT        NOT NULL,
    processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (message_id), -- PostgreSQL: processed_messages_pkey
    INDEX processed_messages_oldest_first (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- The key idempotency tokens are signed with, when IDEMPOTENCY_TOKEN_SECRET is not set:
-- generated by the first instance to start and read by every other (0006). One row at most.
CREATE TABLE idempotency_token_secret (
    singleton  BOOLEAN     NOT NULL DEFAULT TRUE,
    secret     LONGBLOB    NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (singleton), -- PostgreSQL: idempotency_token_secret_pkey
    -- PostgreSQL: CHECK (singleton). BOOLEAN is TINYINT(1) here, where 2 or -1 are true too
    -- and would each be another primary key value, so the CHECK asks for TRUE (1) itself: one
    -- row at most, as in PostgreSQL.
    CONSTRAINT idempotency_token_secret_one_row CHECK (singleton = TRUE),
    -- OCTET_LENGTH() counts bytes, as PostgreSQL's length(bytea) does.
    CONSTRAINT idempotency_token_secret_long_enough CHECK (OCTET_LENGTH(secret) >= 32)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- How many times handling each message failed (an error, not contention), counted by the
-- consumer itself (0008): the broker's count also grows whenever a channel holding the message
-- closes, so it cannot tell a message that keeps failing from one whose consumers kept dying.
-- Written outside the failed transaction, which rolled back.
CREATE TABLE message_failures (
    message_id BINARY(16)  NOT NULL,
    failures   INT         NOT NULL,
    last_error TEXT        NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (message_id), -- PostgreSQL: message_failures_pkey
    -- Unnamed in the PostgreSQL migration; this is the name PostgreSQL gave it.
    CONSTRAINT message_failures_failures_check CHECK (failures > 0),
    INDEX message_failures_oldest_first (updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
