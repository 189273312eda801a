-- A whole batch of `POST /deductions` in one call: read, judge, write and (the caller sends it
-- as one statement in an implicit transaction) commit in ONE round trip. With five round
-- trips a batch (begin, read stock, read ids, write, commit) the batch's connection sat idle
-- most of the time it held the product's lock.
--
-- Every request of a batch names the same products (`batch_products`, ascending, each once):
-- the service groups requests by that set. Request i's quantity of product j is
-- `quantities[(i - 1) * n + j]`, n = cardinality(batch_products).
--
-- The rules, as if the requests had come one at a time in array order:
-- - an id stored before this call: 'stored' (same fingerprint) or 'reused' (other items);
-- - an id repeated inside the call: 'same' as its first request, or 'reused';
-- - otherwise 'first': APPLIED when every product has the quantity left by the requests
--   before it, else REJECTED by the first product (ascending) unknown or short, taking nothing.
-- Its recorded response is chosen from the ones the caller prepared: applied_bodies[i] for
-- APPLIED, short_bodies[j] or unknown_bodies[j] for a refusal by product j.
--
-- Returns one row per request, in order: the verdict and, unless 'reused', the outcome its
-- id has in `deductions` (the first answer, to send or to replay).
--
-- Raises serialization_failure (40001, retried by the caller) when another writer recorded
-- one of these ids meanwhile, or when the conditional update changed fewer rows than judged;
-- raises invalid_parameter_value on malformed input. Either way nothing is written.
CREATE FUNCTION apply_deductions(
    batch_products bigint[],
    ids            text[],
    fingerprints   text[],
    items          jsonb[],
    quantities     bigint[],
    applied_status smallint,
    applied_bodies bytea[],
    short_status   smallint,
    short_bodies   bytea[],
    unknown_status smallint,
    unknown_bodies bytea[]
) RETURNS TABLE (
    ordinal          integer,
    verdict          text,
    status           text,
    rejection_reason text,
    response_status  smallint,
    response_body    bytea
) LANGUAGE plpgsql
-- Each statement planned for the values and table sizes of this call. A cached generic plan
-- is made once, early, while `deductions` is nearly empty; its scan of the whole table then
-- grew with every deduction stored.
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    n          integer := coalesce(cardinality(batch_products), 0);
    m          integer := coalesce(cardinality(ids), 0);
    -- Per product j: units left (NULL: no such product), the version read, units taken.
    stock_left bigint[];
    versions   bigint[];
    taken      bigint[];
    -- Ids stored before this call, with their fingerprints and first outcomes.
    stored_ids     text[];
    stored_fps     text[];
    stored_status  text[];
    stored_reasons text[];
    stored_codes   smallint[];
    stored_bodies  bytea[];
    -- Per request i.
    verdicts   text[] := array_fill(NULL::text, ARRAY[m]);
    statuses   text[] := array_fill(NULL::text, ARRAY[m]);
    reasons    text[] := array_fill(NULL::text, ARRAY[m]);
    resp_codes smallint[] := array_fill(NULL::smallint, ARRAY[m]);
    resp_bodies bytea[] := array_fill(NULL::bytea, ARRAY[m]);
    firsts     integer := 0;
    changes    integer := 0;
    written    bigint;
    i          integer;
    j          integer;
    first      integer;
    stored_at  integer;
    refused_by integer;
    s          bigint;
    v          bigint;
BEGIN
    IF n = 0 OR m = 0
        OR coalesce(cardinality(fingerprints), 0) <> m
        OR coalesce(cardinality(items), 0) <> m
        OR coalesce(cardinality(quantities), 0) <> m * n
        OR coalesce(cardinality(applied_bodies), 0) <> m
        OR coalesce(cardinality(short_bodies), 0) <> n
        OR coalesce(cardinality(unknown_bodies), 0) <> n
        OR applied_status IS NULL OR short_status IS NULL OR unknown_status IS NULL
        -- A missing id or fingerprint would otherwise surface as a not-null violation.
        OR array_position(ids, NULL) IS NOT NULL OR array_position(fingerprints, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'apply_deductions: % products and % requests with arrays of other lengths or missing ids', n, m
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR j IN 1..n LOOP
        IF batch_products[j] IS NULL OR (j > 1 AND batch_products[j] <= batch_products[j - 1]) THEN
            RAISE EXCEPTION 'apply_deductions: products must be ascending and distinct, got %', batch_products
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    FOR i IN 1..m * n LOOP
        IF quantities[i] IS NULL OR quantities[i] < 1 THEN
            RAISE EXCEPTION 'apply_deductions: quantity % is not positive', quantities[i]
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    SELECT array_agg(d.deduction_id), array_agg(d.fingerprint), array_agg(d.status),
           array_agg(d.rejection_reason), array_agg(d.response_status), array_agg(d.response_body)
      INTO stored_ids, stored_fps, stored_status, stored_reasons, stored_codes, stored_bodies
      FROM deductions AS d
     WHERE d.deduction_id = ANY (ids);

    FOR i IN 1..m LOOP
        first := array_position(ids, ids[i]);
        stored_at := array_position(stored_ids, ids[i]);
        IF stored_at IS NOT NULL THEN
            IF stored_fps[stored_at] = fingerprints[i] THEN
                verdicts[i] := 'stored';
                statuses[i] := stored_status[stored_at];
                reasons[i] := stored_reasons[stored_at];
                resp_codes[i] := stored_codes[stored_at];
                resp_bodies[i] := stored_bodies[stored_at];
            ELSE
                verdicts[i] := 'reused';
            END IF;
        ELSIF first < i THEN
            IF fingerprints[first] = fingerprints[i] THEN
                verdicts[i] := 'same';
                statuses[i] := statuses[first];
                reasons[i] := reasons[first];
                resp_codes[i] := resp_codes[first];
                resp_bodies[i] := resp_bodies[first];
            ELSE
                verdicts[i] := 'reused';
            END IF;
        ELSE
            verdicts[i] := 'first';
            firsts := firsts + 1;
            IF firsts = 1 THEN
                -- Locked (only when something is to be judged) in ascending id, so two
                -- batches never wait on each other in a cycle. Held to the commit, so what
                -- is judged here is what the update finds.
                FOR j IN 1..n LOOP
                    s := NULL;
                    v := NULL;
                    SELECT p.stock, p.version INTO s, v
                      FROM products AS p
                     WHERE p.product_id = batch_products[j]
                       FOR UPDATE;
                    stock_left[j] := s;
                    versions[j] := v;
                    taken[j] := 0;
                END LOOP;
            END IF;
            refused_by := NULL;
            FOR j IN 1..n LOOP
                IF stock_left[j] IS NULL THEN
                    reasons[i] := 'unknown_product';
                ELSIF stock_left[j] < quantities[(i - 1) * n + j] THEN
                    reasons[i] := 'insufficient_stock';
                ELSE
                    CONTINUE;
                END IF;
                refused_by := j;
                EXIT;
            END LOOP;
            IF refused_by IS NULL THEN
                FOR j IN 1..n LOOP
                    stock_left[j] := stock_left[j] - quantities[(i - 1) * n + j];
                    taken[j] := taken[j] + quantities[(i - 1) * n + j];
                END LOOP;
                statuses[i] := 'APPLIED';
                resp_codes[i] := applied_status;
                resp_bodies[i] := applied_bodies[i];
            ELSE
                statuses[i] := 'REJECTED';
                IF reasons[i] = 'unknown_product' THEN
                    resp_codes[i] := unknown_status;
                    resp_bodies[i] := unknown_bodies[refused_by];
                ELSE
                    resp_codes[i] := short_status;
                    resp_bodies[i] := short_bodies[refused_by];
                END IF;
            END IF;
        END IF;
    END LOOP;

    IF firsts > 0 THEN
        -- Waits for a writer inserting one of these ids right now; if it commits, its row
        -- wins and this call is undone and judged again (then as 'stored').
        INSERT INTO deductions AS d (deduction_id, fingerprint, items, status, rejection_reason,
                                     response_status, response_body)
        SELECT ids[k], fingerprints[k], items[k], statuses[k], reasons[k], resp_codes[k],
               resp_bodies[k]
          FROM generate_subscripts(ids, 1) AS k
         WHERE verdicts[k] = 'first'
            ON CONFLICT ON CONSTRAINT deductions_pkey DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> firsts THEN
            RAISE EXCEPTION 'apply_deductions: a deduction id of this batch was recorded meanwhile'
                USING ERRCODE = 'serialization_failure';
        END IF;

        -- The conditional update, the guard against overselling whatever the lock did: each
        -- product changes once, only if it still has the version read and the stock taken.
        SELECT count(*) INTO changes FROM unnest(taken) AS t (quantity) WHERE t.quantity > 0;
        UPDATE products AS p
           SET stock = p.stock - t.quantity, version = p.version + 1, updated_at = now()
          FROM unnest(batch_products, taken, versions) AS t (product_id, quantity, version)
         WHERE t.quantity > 0
           AND p.product_id = t.product_id
           AND p.version = t.version
           AND p.stock >= t.quantity;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> changes THEN
            RAISE EXCEPTION 'apply_deductions: % of % stock changes found their row as read', written, changes
                USING ERRCODE = 'serialization_failure';
        END IF;
    END IF;

    -- From memory, not from the table: a join here was planned once, generically, as a scan
    -- of every stored deduction.
    RETURN QUERY
    SELECT u.ord::integer, u.verdict, u.status, u.reason, u.code, u.body
      FROM unnest(verdicts, statuses, reasons, resp_codes, resp_bodies)
           WITH ORDINALITY AS u (verdict, status, reason, code, body, ord)
     ORDER BY u.ord;
END;
$$;
