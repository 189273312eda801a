-- pgbench script (a): the transaction order-service commits for every new order
-- (order-service/src/place_order.rs `create`, db/orders.rs `insert`, db/idempotency.rs `insert`,
-- platform/src/outbox.rs `enqueue`), run against a scratch database built from
-- migrations/order-service/*.sql. It measures how many orders per second PostgreSQL itself can
-- take on this machine, i.e. the ceiling for `POST /orders`.
--
-- Faithful where it matters for throughput:
--   * one statement per round trip inside BEGIN/COMMIT, as sqlx sends them;
--   * the order row comes back with RETURNING (the service serialises it into the response);
--   * the idempotency outcome and the outbox row carry bodies of realistic size;
--   * the outbox insert fires the `outbox_notify` trigger, so COMMIT takes PostgreSQL's global
--     NOTIFY lock exactly as the service's transactions do (this serialises commits).
-- Not the same: the service's order and event ids are UUIDv7 (time-ordered), PostgreSQL 15 has
-- only gen_random_uuid() (v4). For a 20 s run the indexes stay in memory, so it barely matters.
-- Not included: the relay later marking the outbox row sent, and the consumer settling the
-- order; those are separate, smaller transactions.
\set user_id random(1, 100000)
\set product_id random(1, 1000)
\set quantity random(1, 5)
-- Run with `-M prepared` (as sqlx does): every colon-prefixed variable becomes a bound parameter,
-- hence the casts. Beware: pgbench takes colon-name anywhere in a statement (even inside a string
-- literal or comment) for a variable, which is why the replayed response body (the Order JSON) is
-- built with json_build_object, and why no comment sits inside a statement.
BEGIN;
INSERT INTO orders (order_id, user_id, items, amount)
VALUES (gen_random_uuid(), :user_id::bigint,
        jsonb_build_array(jsonb_build_object('product_id', :product_id::bigint,
                                             'quantity', :quantity::bigint)),
        :quantity::int * 100.00)
RETURNING order_id, user_id, items, amount, status, rejection_reason, created_at, updated_at
\gset
INSERT INTO idempotency_keys (token, fingerprint, order_id, response_status, response_body)
VALUES (gen_random_uuid(),
        '3f1d0c6b9a2e4f5d8c7b6a5948372615f0e1d2c3b4a5968778695a4b3c2d1e0f',
        :order_id::uuid, 202,
        convert_to(json_build_object(
            'order_id', :order_id::uuid, 'user_id', :user_id::bigint, 'items', :items::json,
            'amount', :amount::text, 'status', 'PENDING', 'rejection_reason', NULL::text,
            'created_at', :created_at::timestamptz, 'updated_at', :updated_at::timestamptz)::text,
            'UTF8'));
INSERT INTO outbox (event_id, exchange, routing_key, payload, headers)
VALUES (gen_random_uuid(), 'orders.events', 'order.created',
        jsonb_build_object(
            'event_id', gen_random_uuid(), 'version', 1, 'occurred_at', now(),
            'event_type', 'order.created',
            'payload', jsonb_build_object('order_id', :order_id::uuid, 'user_id', :user_id::bigint,
                                          'items', :items::jsonb, 'amount', :amount::numeric)),
        jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'));
COMMIT;
