-- pgbench script (a): the statement order-service runs for every new order
-- (order-service/src/orders/intake/placement.rs): the order row, the idempotency outcome and the
-- `order.created` outbox row in one `INSERT ... WITH` statement, i.e. one implicit transaction
-- and one round trip. Run against a scratch database built from migrations/order-service/postgres/*.sql.
-- It measures how many orders per second PostgreSQL itself can take on this machine, the ceiling
-- for `POST /orders`.
--
-- Faithful where it matters for throughput:
--   * one statement, autocommit, as the service sends it;
--   * the idempotency outcome and the outbox row carry bodies of realistic size;
--   * the schema is the migrated one, so the same indexes and constraints are maintained (the
--     relay is woken in-process: no trigger, no NOTIFY).
-- Not the same: the service's ids are UUIDv7 (time-ordered); PostgreSQL 15 has only
-- gen_random_uuid() (v4). For a 20 s run the indexes stay in memory, so it barely matters.
-- Not included: the relay later marking the outbox row sent, inventory's reservation and the
-- consumer settling the order; those are the rest of the pipeline, not this transaction.
-- Run with `-M prepared` (as sqlx does): every colon-prefixed variable becomes a bound parameter,
-- hence the casts. pgbench takes a colon-name anywhere in a statement (even in a string literal)
-- for a variable, so no comment sits inside the statement.
\set user_id random(1, 100000)
\set product_id random(1, 1000)
\set quantity random(1, 5)
WITH ids AS (
    SELECT gen_random_uuid() AS order_id, now() AS at
), new_order AS (
    INSERT INTO orders (order_id, user_id, items, amount, created_at, updated_at)
    SELECT order_id, :user_id::bigint,
           jsonb_build_array(jsonb_build_object('product_id', :product_id::bigint,
                                                'quantity', :quantity::bigint)),
           :quantity::int * 100.00, at, at
    FROM ids
), outcome AS (
    INSERT INTO idempotency_keys (token, fingerprint, order_id, response_status, response_body)
    SELECT gen_random_uuid(),
           '3f1d0c6b9a2e4f5d8c7b6a5948372615f0e1d2c3b4a5968778695a4b3c2d1e0f',
           order_id, 202,
           convert_to(json_build_object(
               'order_id', order_id, 'user_id', :user_id::bigint,
               'items', json_build_array(json_build_object('product_id', :product_id::bigint,
                                                           'quantity', :quantity::bigint)),
               'amount', (:quantity::int * 100.00)::text, 'status', 'PENDING',
               'rejection_reason', NULL::text, 'created_at', at, 'updated_at', at)::text, 'UTF8')
    FROM ids
)
INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
SELECT gen_random_uuid(), 'orders.events', 'order.created',
       jsonb_build_object(
           'event_id', gen_random_uuid(), 'version', 1, 'occurred_at', at,
           'event_type', 'order.created',
           'payload', jsonb_build_object('order_id', order_id, 'user_id', :user_id::bigint,
                                         'items', jsonb_build_array(jsonb_build_object(
                                             'product_id', :product_id::bigint,
                                             'quantity', :quantity::bigint)),
                                         'amount', (:quantity::int * 100.00)::text)),
       jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')
FROM ids;
