-- Holds (docs/contract.md §3.4): stock frozen for a caller until it is confirmed, cancelled
-- or expires. A hold's try takes its units out of `products.stock` in the same statement
-- that writes its row (the group commit of `POST /deductions`); while the hold is HELD its
-- units are rows of `held_units`, so a product's `held` is their sum and a confirm, which
-- moves nothing back to stock, never writes the product's (hot) row.

CREATE TABLE holds (
    hold_id          TEXT NOT NULL,
    -- sha256 of the canonical body (items sorted by product id, the TTL): "same body"
    -- compares this. NULL on a tombstone (a cancel that came before its try).
    fingerprint      TEXT,
    -- The canonical items; `[]` on a tombstone.
    items            JSONB NOT NULL,
    -- REFUSED is a try that held nothing (short stock, unknown product), kept so a repeat
    -- answers the same; the API shows no hold for it.
    state            TEXT NOT NULL,
    rejection_reason TEXT,
    -- NULL on a tombstone and a refusal.
    expires_at       TIMESTAMPTZ,
    -- The try's first response, replayed byte for byte; NULL on a tombstone.
    response_status  SMALLINT,
    response_body    BYTEA,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT holds_pkey PRIMARY KEY (hold_id),
    CONSTRAINT holds_hold_id_length CHECK (char_length(hold_id) BETWEEN 1 AND 128),
    CONSTRAINT holds_state_known
        CHECK (state IN ('HELD', 'CONFIRMED', 'CANCELLED', 'EXPIRED', 'REFUSED')),
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
    )
);

-- The expiry sweep: the due holds, oldest deadline first, without reading finished ones.
CREATE INDEX holds_due_idx ON holds (expires_at) WHERE state = 'HELD';
-- Retention: finished holds and tombstones by age.
CREATE INDEX holds_finished_idx ON holds (updated_at) WHERE state <> 'HELD';

-- The units of every HELD hold, one row per product: inserted by the try, deleted by the
-- confirm, cancel or expiry that ends the hold, in the same statement as its state change.
CREATE TABLE held_units (
    hold_id    TEXT NOT NULL,
    product_id BIGINT NOT NULL,
    quantity   BIGINT NOT NULL,
    -- No foreign key to `holds`: both rows are written and deleted by the same statements,
    -- and its check would cost a trigger and a row lock per unit on the hottest write.
    CONSTRAINT held_units_pkey PRIMARY KEY (hold_id, product_id),
    CONSTRAINT held_units_quantity_positive CHECK (quantity > 0)
);

-- A product's `held`: the sum over this index's range.
CREATE INDEX held_units_product_idx ON held_units (product_id) INCLUDE (quantity);

-- A product's `held`, as every read of a product shows it.
CREATE FUNCTION held_of(product bigint) RETURNS bigint
    LANGUAGE sql STABLE AS $$
        SELECT coalesce(sum(quantity), 0)::bigint FROM held_units WHERE product_id = product
    $$;

-- Gives the units of `holds` back to stock: deletes their `held_units` and adds them to
-- their products, locked in ascending id first (as every writer of stock locks them, so this
-- never waits in a cycle with a batch of deductions). The one give-back path, used by a cancel
-- and by the expiry in the statement that ends the holds; returns the products changed.
CREATE FUNCTION give_back_held(holds text[]) RETURNS bigint
    LANGUAGE sql AS $$
        WITH freed AS (
            DELETE FROM held_units WHERE hold_id = ANY (holds) RETURNING product_id, quantity
        ), back AS (
            SELECT product_id, sum(quantity)::bigint AS quantity FROM freed GROUP BY product_id
        ), ordered AS MATERIALIZED (
            SELECT product_id FROM products
             WHERE product_id IN (SELECT product_id FROM back)
             ORDER BY product_id FOR UPDATE
        ), given AS (
            UPDATE products AS p
               SET stock = p.stock + b.quantity, version = p.version + 1, updated_at = now()
              FROM back AS b
             WHERE p.product_id = b.product_id AND (SELECT count(*) FROM ordered) >= 0
            RETURNING 1
        )
        SELECT count(*) FROM given
    $$;
