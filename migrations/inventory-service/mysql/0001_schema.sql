-- inventory-service schema for MariaDB 10.6+ and MySQL 8.0.16+ (CHECK constraints are
-- enforced from 8.0.16 on; earlier MySQL parses and ignores them).
--
-- The schema as it stands after every PostgreSQL migration of ../postgres (0001 to 0008): a
-- fresh MariaDB/MySQL database starts here, with no history to replay. Every table, column (in
-- the same order), default, key, CHECK and index is PostgreSQL's, under the same name (primary
-- keys aside: see Keys below): the code matches on constraint names.
--
-- Collation: every table is utf8mb4 with a binary, NO PAD collation, so text compares byte by
-- byte and 'abc', 'ABC' and 'abc ' are three values, as in PostgreSQL. The servers' default
-- collations are case-insensitive and PAD SPACE, which would make them one idempotency key,
-- deduction id or hold id. MariaDB spells it utf8mb4_nopad_bin; MySQL 8 has no such name and
-- spells it utf8mb4_0900_bin (also binary and NO PAD): on MySQL 8 replace
-- `utf8mb4_nopad_bin` by `utf8mb4_0900_bin` throughout.
--
-- What the sessions are assumed to be (platform/src/storage/mysql.rs sets them): time_zone
-- '+00:00', so every DATETIME(6) below holds UTC; a strict sql_mode, so an out-of-range or
-- too-long value is refused rather than clipped. No `||` appears in a CHECK (the sessions run
-- with PIPES_AS_CONCAT).
--
-- Types, PostgreSQL -> here:
--   uuid          -> BINARY(16): the 16 bytes sqlx sends for a uuid::Uuid on MySQL, compared
--                    byte-wise as PostgreSQL compares uuids.
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
--   text          -> VARCHAR(n) when keyed, indexed or length-checked (n: the CHECK's maximum),
--                    else TEXT. DIFFERS: a value longer than n characters is refused by the
--                    column (error 1406, data too long) before the length CHECK sees it; a
--                    value too short (empty) is still refused by the named CHECK (error 4025).
--                    DIFFERS: TEXT holds at most 65,535 bytes (PostgreSQL text: 1 GB); a longer
--                    value is refused (strict mode), so the store bounds what it writes there.
--   bigint GENERATED ALWAYS AS IDENTITY -> BIGINT NOT NULL AUTO_INCREMENT.
--
-- Keys: DIFFERS: a primary key's name is always PRIMARY in MariaDB/MySQL (a name given to it
-- is ignored, with warning 1280), so each primary key below gives PostgreSQL's name (x_pkey)
-- in a comment; a duplicate key error names 'PRIMARY' (MySQL 8: '<table>.PRIMARY'), which
-- code matching on x_pkey reads as that table's x_pkey. Unique keys, foreign keys, CHECKs and
-- indexes keep PostgreSQL's names.
-- PostgreSQL's partial indexes (`WHERE state = ...`) do not exist here: each becomes a full
-- index, of the same name, led by the filtered column, so the same range is found by an
-- equality on it; it covers every row, not only the filtered ones.
--
-- Left out, as PostgreSQL mechanics or old releases (this schema has no stored procedures,
-- functions or triggers):
-- - outbox_notify(), a trigger function (0002, dropped by 0003): pg_notify('outbox') on every
--   insert into outbox to wake the relay. The relay is woken in-process after each commit that
--   wrote outbox rows, on either backend.
-- - apply_deductions(...) (0004): judged and wrote a whole batch of `POST /deductions` in one
--   PL/pgSQL call. Not called since 0005 (the stock engine in Rust judges batches) and kept in
--   PostgreSQL only for the previous release during a rolling update; a MySQL database never
--   served that release.
-- - serialization_failure(message) (0005): raised SQLSTATE 40001 (serialization_failure) with
--   `message`. A statement writing a whole judged batch called it from a CASE when one of its
--   guards found fewer rows than were decided (a product moved or its stock changed since it
--   was read, a deduction id, hold id, reservation or message recorded meanwhile), so the
--   statement undid itself and the caller judged the batch again as contention. The MySQL
--   store does this in its own statements instead: the batch's statements run in one
--   transaction, each guarded statement's affected rows are compared with what was decided,
--   and on a mismatch the transaction is rolled back and reported as the same contention.
-- - held_of(product) (0007): a product's `held`, coalesce(sum(quantity), 0) of its held_units
--   rows, read with every product. The MySQL store computes it in its statements instead:
--   `(SELECT COALESCE(SUM(u.quantity), 0) FROM held_units AS u WHERE u.product_id =
--   p.product_id)`, answered from held_units_product_idx alone.
-- - give_back_held(holds) (0007): the one give-back path of a cancel and of the expiry: deleted
--   the held_units of `holds`, locked their products in ascending id (as every writer of stock
--   locks them, so it never waits in a cycle with a batch of deductions), added each product's
--   summed units back to stock with version + 1 and updated_at = now(), and returned how many
--   products changed. The MySQL store does it in its statements instead, in the transaction
--   that ends the holds: lock the products (`SELECT ... WHERE product_id IN (...) ORDER BY
--   product_id FOR UPDATE`), add the sums of those holds' held_units to them, delete the
--   held_units rows.

-- Products and their stock, the restock ledger and the outcomes of direct deductions.

CREATE TABLE products (
    product_id BIGINT       NOT NULL,
    -- VARCHAR(200): products_name_length's maximum.
    name       VARCHAR(200) NOT NULL,
    stock      BIGINT       NOT NULL,
    -- Bumped by every stock change; the conditional update compares it, so a writer that
    -- read an old row (a lock holder paused past its lock's TTL) changes nothing.
    version    BIGINT       NOT NULL DEFAULT 0,
    created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (product_id), -- PostgreSQL: products_pkey
    CONSTRAINT products_product_id_positive CHECK (product_id > 0),
    CONSTRAINT products_name_length CHECK (CHAR_LENGTH(name) BETWEEN 1 AND 200),
    -- The last line of defence: whatever the code does, stock never goes below zero.
    CONSTRAINT products_stock_non_negative CHECK (stock >= 0),
    CONSTRAINT products_version_non_negative CHECK (version >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- One row per applied restock. With a client-chosen idempotency key the first response is
-- kept, so a repeat adds nothing and answers the same bytes.
CREATE TABLE restocks (
    restock_id      BINARY(16)   NOT NULL,
    product_id      BIGINT       NOT NULL,
    quantity        BIGINT       NOT NULL,
    -- VARCHAR(255): restocks_idempotency_key_length's maximum (1,020 bytes, fits a key).
    idempotency_key VARCHAR(255),
    response_body   LONGBLOB     NOT NULL,
    created_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (restock_id), -- PostgreSQL: restocks_pkey
    -- InnoDB uses restocks_product_id_idx for this key, as it needs an index on its column.
    -- DIFFERS: InnoDB checks the key row by row, PostgreSQL (NO ACTION) at the statement's end.
    CONSTRAINT restocks_product_fkey FOREIGN KEY (product_id) REFERENCES products (product_id),
    -- As much as a product may start with (0008): the bound keeps any sum of restocks far from
    -- bigint's limit; the service checks the same range before it writes.
    CONSTRAINT restocks_quantity_range CHECK (quantity BETWEEN 1 AND 1000000000),
    CONSTRAINT restocks_idempotency_key_length
        CHECK (CHAR_LENGTH(idempotency_key) BETWEEN 1 AND 255),
    -- NULL keys (restocks sent without the header) never collide, as in PostgreSQL.
    CONSTRAINT restocks_idempotency_key_unique UNIQUE (idempotency_key),
    INDEX restocks_product_id_idx (product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- One row per deduction id of `POST /deductions`, applied or rejected, written in the same
-- transaction as the stock change (or, for a rejection, as the absence of one). The primary
-- key decides between concurrent first requests with the same id.
CREATE TABLE deductions (
    -- VARCHAR(128): deductions_deduction_id_length's maximum.
    deduction_id     VARCHAR(128) NOT NULL,
    -- sha256 of the canonical items (sorted by product id): "same items" compares this.
    fingerprint      TEXT         NOT NULL,
    -- The canonical items, for audits and the stock invariants.
    items            JSON         NOT NULL,
    status           TEXT         NOT NULL,
    rejection_reason TEXT,
    -- The first response, replayed byte for byte.
    response_status  SMALLINT     NOT NULL,
    response_body    LONGBLOB     NOT NULL,
    created_at       DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at       DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (deduction_id), -- PostgreSQL: deductions_pkey
    CONSTRAINT deductions_deduction_id_length CHECK (CHAR_LENGTH(deduction_id) BETWEEN 1 AND 128),
    CONSTRAINT deductions_status_known CHECK (status IN ('APPLIED', 'REJECTED')),
    -- As in PostgreSQL, REJECTED with a NULL reason passes: `NULL IN (...)` is unknown, and a
    -- CHECK refuses only what is false.
    CONSTRAINT deductions_rejection_reason_matches CHECK (
        (status = 'APPLIED' AND rejection_reason IS NULL)
        OR (status = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
    ),
    CONSTRAINT deductions_response_status_range CHECK (response_status BETWEEN 200 AND 599)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- The saga's side of inventory: what happened to each order's stock, the transactional
-- outbox, and the ids of consumed messages.

-- One row per order inventory has heard of. APPLIED: stock deducted; REJECTED: nothing
-- deducted; RELEASED: deducted, then given back; CANCELLED: the cancellation came first (a
-- tombstone), so nothing was or will be deducted.
CREATE TABLE reservations (
    order_id         BINARY(16)  NOT NULL,
    state            TEXT        NOT NULL,
    items            JSON        NOT NULL DEFAULT ('[]'),
    rejection_reason TEXT,
    created_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (order_id), -- PostgreSQL: reservations_pkey
    CONSTRAINT reservations_state_known
        CHECK (state IN ('APPLIED', 'REJECTED', 'RELEASED', 'CANCELLED')),
    -- As in PostgreSQL, REJECTED with a NULL reason passes: `NULL IN (...)` is unknown, and a
    -- CHECK refuses only what is false.
    CONSTRAINT reservations_rejection_reason_known CHECK (
        (state = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
        OR (state <> 'REJECTED' AND rejection_reason IS NULL)
    )
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- The same shape as order-service's outbox: `platform::relay` publishes both.
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

CREATE TABLE processed_messages (
    message_id   BINARY(16)  NOT NULL,
    kind         TEXT        NOT NULL,
    processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (message_id), -- PostgreSQL: processed_messages_pkey
    INDEX processed_messages_oldest_first (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- How many times handling each message failed (an error, not contention), counted by the
-- consumer itself (0006): the broker's count also grows whenever a channel holding the message
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

-- Holds (docs/contract.md §3.4): stock frozen for a caller until it is confirmed, cancelled
-- or expires. A hold's try takes its units out of `products.stock` in the same statement
-- that writes its row; while the hold is HELD its units are rows of `held_units`, so a
-- product's `held` is their sum and a confirm, which moves nothing back to stock, never
-- writes the product's (hot) row.
CREATE TABLE holds (
    -- VARCHAR(128): holds_hold_id_length's maximum.
    hold_id          VARCHAR(128) NOT NULL,
    -- sha256 of the canonical body (items sorted by product id, the TTL): "same body"
    -- compares this. NULL on a tombstone (a cancel that came before its try).
    fingerprint      TEXT,
    -- The canonical items; `[]` on a tombstone.
    items            JSON         NOT NULL,
    -- REFUSED is a try that held nothing (short stock, unknown product), kept so a repeat
    -- answers the same; the API shows no hold for it.
    -- VARCHAR, not TEXT: indexed. DIFFERS: over 32 characters is refused by the column (error
    -- 1406) rather than by holds_state_known.
    state            VARCHAR(32)  NOT NULL,
    rejection_reason TEXT,
    -- NULL on a tombstone and a refusal.
    expires_at       DATETIME(6),
    -- The try's first response, replayed byte for byte; NULL on a tombstone.
    response_status  SMALLINT,
    response_body    LONGBLOB,
    created_at       DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at       DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (hold_id), -- PostgreSQL: holds_pkey
    CONSTRAINT holds_hold_id_length CHECK (CHAR_LENGTH(hold_id) BETWEEN 1 AND 128),
    CONSTRAINT holds_state_known
        CHECK (state IN ('HELD', 'CONFIRMED', 'CANCELLED', 'EXPIRED', 'REFUSED')),
    -- Comparing two conditions with `=` works as in PostgreSQL: each is 1 or 0 (or NULL).
    CONSTRAINT holds_refusal_matches CHECK (
        (state = 'REFUSED') = (rejection_reason IS NOT NULL)
        AND (rejection_reason IS NULL
             OR rejection_reason IN ('insufficient_stock', 'unknown_product'))
    ),
    -- A tombstone has neither a body nor a deadline; every try has a body, and every try that
    -- held something has a deadline.
    CONSTRAINT holds_shape CHECK (
        (fingerprint IS NULL AND state = 'CANCELLED' AND expires_at IS NULL
            AND response_status IS NULL AND response_body IS NULL)
        OR (fingerprint IS NOT NULL AND response_status BETWEEN 200 AND 599
            AND response_body IS NOT NULL AND (expires_at IS NULL) = (state = 'REFUSED'))
    ),
    -- The expiry sweep: the due holds, oldest deadline first, without reading finished ones.
    -- PostgreSQL: (expires_at) WHERE state = 'HELD'. Partial index -> led by state.
    INDEX holds_due_idx (state, expires_at),
    -- Retention: finished holds and tombstones by age.
    -- PostgreSQL: (updated_at) WHERE state <> 'HELD'. Partial index -> led by state: `state <>
    -- 'HELD'` reads the ranges on either side of HELD; naming the finished states (`state IN
    -- ('CONFIRMED', 'CANCELLED', 'EXPIRED', 'REFUSED')`) makes updated_at a range within each.
    INDEX holds_finished_idx (state, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

-- The units of every HELD hold, one row per product: inserted by the try, deleted by the
-- confirm, cancel or expiry that ends the hold, in the same statement (here: transaction) as
-- its state change.
CREATE TABLE held_units (
    -- VARCHAR(128), as holds.hold_id: part of the primary key, so it needs a length.
    -- DIFFERS: PostgreSQL's column is unbounded text; every value is a hold id, which
    -- holds_hold_id_length keeps to 128 characters, so a longer one is refused here (error
    -- 1406) where PostgreSQL would have stored it.
    hold_id    VARCHAR(128) NOT NULL,
    product_id BIGINT       NOT NULL,
    quantity   BIGINT       NOT NULL,
    -- No foreign key to `holds`: both rows are written and deleted together, and its check
    -- would cost a row lock per unit on the hottest write.
    PRIMARY KEY (hold_id, product_id), -- PostgreSQL: held_units_pkey
    CONSTRAINT held_units_quantity_positive CHECK (quantity > 0),
    -- A product's `held`: the sum over this index's range.
    -- PostgreSQL: (product_id) INCLUDE (quantity). No INCLUDE here: quantity is a trailing
    -- key column instead, so the sum is still read from the index alone.
    INDEX held_units_product_idx (product_id, quantity)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
