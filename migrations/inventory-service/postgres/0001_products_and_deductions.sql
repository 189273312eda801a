-- Products and their stock, the restock ledger and the outcomes of direct deductions.
-- Every constraint is named: the code refers to these names, so they must not change.
-- Later migrations add the outbox, processed message ids and reservations.

CREATE TABLE products (
    product_id BIGINT NOT NULL,
    name       TEXT NOT NULL,
    stock      BIGINT NOT NULL,
    -- Bumped by every stock change; the conditional update compares it, so a writer that
    -- read an old row (a lock holder paused past its lock's TTL) changes nothing.
    version    BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT products_pkey PRIMARY KEY (product_id),
    CONSTRAINT products_product_id_positive CHECK (product_id > 0),
    CONSTRAINT products_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    -- The last line of defence: whatever the code does, stock never goes below zero.
    CONSTRAINT products_stock_non_negative CHECK (stock >= 0),
    CONSTRAINT products_version_non_negative CHECK (version >= 0)
);

-- One row per applied restock. With a client-chosen idempotency key the first response is
-- kept, so a repeat adds nothing and answers the same bytes.
CREATE TABLE restocks (
    restock_id      UUID NOT NULL,
    product_id      BIGINT NOT NULL,
    quantity        BIGINT NOT NULL,
    idempotency_key TEXT,
    response_body   BYTEA NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT restocks_pkey PRIMARY KEY (restock_id),
    CONSTRAINT restocks_product_fkey FOREIGN KEY (product_id) REFERENCES products (product_id),
    CONSTRAINT restocks_quantity_range CHECK (quantity BETWEEN 1 AND 1000000),
    CONSTRAINT restocks_idempotency_key_length
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    -- NULL keys (restocks sent without the header) never collide.
    CONSTRAINT restocks_idempotency_key_unique UNIQUE (idempotency_key)
);

CREATE INDEX restocks_product_id_idx ON restocks (product_id);

-- One row per deduction id of `POST /deductions`, applied or rejected, written in the same
-- transaction as the stock change (or, for a rejection, as the absence of one). The primary
-- key decides between concurrent first requests with the same id.
CREATE TABLE deductions (
    deduction_id     TEXT NOT NULL,
    -- sha256 of the canonical items (sorted by product id): "same items" compares this.
    fingerprint      TEXT NOT NULL,
    -- The canonical items, for audits and the stock invariants.
    items            JSONB NOT NULL,
    status           TEXT NOT NULL,
    rejection_reason TEXT,
    -- The first response, replayed byte for byte.
    response_status  SMALLINT NOT NULL,
    response_body    BYTEA NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT deductions_pkey PRIMARY KEY (deduction_id),
    CONSTRAINT deductions_deduction_id_length CHECK (char_length(deduction_id) BETWEEN 1 AND 128),
    CONSTRAINT deductions_status_known CHECK (status IN ('APPLIED', 'REJECTED')),
    CONSTRAINT deductions_rejection_reason_matches CHECK (
        (status = 'APPLIED' AND rejection_reason IS NULL)
        OR (status = 'REJECTED' AND rejection_reason IN ('insufficient_stock', 'unknown_product'))
    ),
    CONSTRAINT deductions_response_status_range CHECK (response_status BETWEEN 200 AND 599)
);
