// checkout (docs/contract.md §6): 50 VUs hold one unit of one hot product each (POST /holds),
// then confirm the hold (80 %), cancel it (10 %) or leave it to expire (10 %, with a short
// TTL). Measures holds applied per second (the 201s) on a single row, the case the try shares
// with direct deductions: compare with pgbench's bare update on one hot row
// (k6/pgbench/stock-update.sql, scripts/bench.sh). teardown() waits until nothing is held any
// more (the short TTLs expired) and checks invariant 1 for the product: the units that left its
// stock are exactly the confirmed ones, and `held` is back to 0.
//
//   k6 run k6/checkout.js
//
// Env: INVENTORY_URL, ADMIN_TOKEN (see k6/README.md), VUS (default 50), DURATION (default 30s),
// EXPIRE_TTL_S (default 2: the TTL of the holds left to expire), SETTLE_TIMEOUT_S (default 60),
// MIX (default `standard`, the 8 / 1 / 1 above; `tries`: every hold left to expire, so each
// iteration is one request and the tries' own rate shows; `confirms`: every hold confirmed).

import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Gauge, Trend } from 'k6/metrics';
import {
  INVENTORY_URL, ADMIN_HEADERS, SUMMARY_TREND_STATS, createProduct, durationSeconds, getProduct, runId, summarize,
} from './lib/common.js';

const VUS = parseInt(__ENV.VUS || '50', 10);
const DURATION = __ENV.DURATION || '30s';
const EXPIRE_TTL_S = parseInt(__ENV.EXPIRE_TTL_S || '2', 10);
const SETTLE_TIMEOUT_S = parseInt(__ENV.SETTLE_TIMEOUT_S || '60', 10);
const MIX = __ENV.MIX || 'standard';
if (!['standard', 'tries', 'confirms'].includes(MIX)) {
  throw new Error(`MIX must be standard, tries or confirms, not ${MIX}`);
}
// The most a product may start with; no run here comes near using it up.
const INITIAL_STOCK = 1000000000;

const held = new Counter('holds_applied');
const refused = new Counter('holds_refused');
const confirmed = new Counter('holds_confirmed');
const cancelled = new Counter('holds_cancelled');
const leftToExpire = new Counter('holds_left_to_expire');
const endFailed = new Counter('hold_ends_failed');
const holdTime = new Trend('hold_duration', true);
const confirmTime = new Trend('confirm_duration', true);
// handleSummary sees only metrics, so teardown hands it the product's figures this way.
const stockConsumed = new Gauge('checkout_stock_consumed');
const heldAtEnd = new Gauge('checkout_held_at_end');

export const options = {
  scenarios: { hot_product: { executor: 'constant-vus', vus: VUS, duration: DURATION } },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    hold_ends_failed: ['count==0'],
    checkout_held_at_end: ['value==0'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
};

export function setup() {
  const id = runId();
  if (createProduct(id, `checkout product ${id}`, INITIAL_STOCK) !== 201) {
    throw new Error(`could not create product ${id}`);
  }
  return { id, productId: id, initialStock: getProduct(id).stock };
}

// Standard: one iteration in ten is left to expire, one in ten cancelled, the rest confirmed.
function fateOf(iteration) {
  if (MIX === 'tries') return 'expire';
  if (MIX === 'confirms') return 'confirm';
  return iteration % 10 === 0 ? 'expire' : iteration % 10 === 5 ? 'cancel' : 'confirm';
}

export default function (data) {
  const holdId = `checkout-${data.id}-${__VU}-${__ITER}`;
  const fate = fateOf(__ITER);
  const res = http.post(`${INVENTORY_URL}/holds`, JSON.stringify({
    hold_id: holdId,
    items: [{ product_id: data.productId, quantity: 1 }],
    ttl_secs: fate === 'expire' ? EXPIRE_TTL_S : 600,
  }), { headers: ADMIN_HEADERS, tags: { name: 'POST /holds' } });
  holdTime.add(res.timings.duration);
  if (!check(res, { 'hold applied (201)': (r) => r.status === 201 })) {
    refused.add(1, { status: String(res.status) });
    return;
  }
  held.add(1);
  if (fate === 'expire') {
    leftToExpire.add(1);
    return;
  }
  const end = http.post(`${INVENTORY_URL}/holds/${encodeURIComponent(holdId)}/${fate}`, null, {
    headers: ADMIN_HEADERS, tags: { name: `POST /holds/{hold_id}/${fate}` },
  });
  const wanted = fate === 'confirm' ? 'CONFIRMED' : 'CANCELLED';
  const ok = check(end, { [`${fate} answered 200 ${wanted}`]: (r) => r.status === 200 && r.json('state') === wanted });
  if (!ok) endFailed.add(1, { fate, status: String(end.status) });
  else if (fate === 'confirm') {
    confirmed.add(1);
    confirmTime.add(end.timings.duration);
  } else cancelled.add(1);
}

export function teardown(data) {
  // The holds left to expire come back within seconds of their TTL.
  const deadline = Date.now() + (EXPIRE_TTL_S + SETTLE_TIMEOUT_S) * 1000;
  let product = getProduct(data.productId);
  while (product.held > 0 && Date.now() < deadline) {
    sleep(0.5);
    product = getProduct(data.productId);
  }
  stockConsumed.add(data.initialStock - product.stock);
  heldAtEnd.add(product.held);
}

export function handleSummary(data) {
  const seconds = durationSeconds(DURATION);
  const value = (name, field) => (data.metrics[name] ? data.metrics[name].values[field] : undefined);
  const count = (name) => value(name, 'count') || 0;
  const ms = (name) => (value(name, 'p(99)') !== undefined ? value(name, 'p(99)').toFixed(1) : 'n/a');
  const consumed = value('checkout_stock_consumed', 'value');
  const report = {
    target: INVENTORY_URL,
    vus: VUS,
    duration_s: seconds,
    holds_applied: count('holds_applied'),
    holds_refused: count('holds_refused'),
    holds_per_s: (count('holds_applied') / seconds).toFixed(1),
    confirms_per_s: (count('holds_confirmed') / seconds).toFixed(1),
    holds_cancelled: count('holds_cancelled'),
    holds_left_to_expire: count('holds_left_to_expire'),
    hold_p99_ms: ms('hold_duration'),
    confirm_p99_ms: ms('confirm_duration'),
    // Invariant 1 for this product: what left the stock is exactly what was confirmed, and
    // nothing is held once the expired holds came back.
    stock_consumed: consumed,
    held_at_end: value('checkout_held_at_end', 'value'),
    stock_matches_confirmed: consumed === count('holds_confirmed') ? 'yes' : 'NO',
  };
  return summarize('checkout', data, report);
}
