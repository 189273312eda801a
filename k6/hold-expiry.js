// hold-expiry: how late the expiry lands when many holds come due together. 50 VUs take
// HOLDS holds (default 10,000, one unit each, on PRODUCTS products with stock for all of them)
// with one TTL (default 60 s), so they all expire within the same minute; nobody confirms or
// cancels them. teardown() waits until every product's `held` is 0, reads every hold back
// (`GET /holds/{hold_id}`) and reports how far each `updated_at` (the moment it became
// EXPIRED) lies past its `expires_at`: p50, p99 and the worst, over the EXPIRED holds.
//
//   k6 run k6/hold-expiry.js
//
// Env: INVENTORY_URL, ADMIN_TOKEN (see k6/README.md), HOLDS (10000), PRODUCTS (10), TTL_S (60),
// VUS (50), SETTLE_TIMEOUT_S (120).

import exec from 'k6/execution';
import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Gauge } from 'k6/metrics';
import {
  INVENTORY_URL, ADMIN_HEADERS, SUMMARY_TREND_STATS, createProduct, getProduct, parseTime, runId, summarize,
} from './lib/common.js';

const HOLDS = parseInt(__ENV.HOLDS || '10000', 10);
const PRODUCTS = parseInt(__ENV.PRODUCTS || '10', 10);
const TTL_S = parseInt(__ENV.TTL_S || '60', 10);
const VUS = parseInt(__ENV.VUS || '50', 10);
const SETTLE_TIMEOUT_S = parseInt(__ENV.SETTLE_TIMEOUT_S || '120', 10);

const held = new Counter('holds_applied');
const lateP50 = new Gauge('expiry_late_p50_ms');
const lateP99 = new Gauge('expiry_late_p99_ms');
const lateMax = new Gauge('expiry_late_max_ms');
const expired = new Gauge('holds_expired');
const notExpired = new Gauge('holds_not_expired');
const dueSpread = new Gauge('deadlines_spread_s');

export const options = {
  scenarios: {
    burst: { executor: 'shared-iterations', vus: VUS, iterations: HOLDS, maxDuration: `${TTL_S}s` },
  },
  thresholds: {
    checks: ['rate>0.99'],
    holds_not_expired: ['value==0'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
  // teardown reads every hold back and waits for the deadlines.
  teardownTimeout: `${TTL_S + SETTLE_TIMEOUT_S + 120}s`,
};

export function setup() {
  const id = runId();
  const products = [];
  for (let i = 0; i < PRODUCTS; i += 1) {
    const productId = id + i;
    if (createProduct(productId, `expiry product ${productId}`, HOLDS) !== 201) {
      throw new Error(`could not create product ${productId}`);
    }
    products.push(productId);
  }
  return { id, products };
}

export default function (data) {
  // Unique across VUs: 0 .. HOLDS - 1.
  const n = exec.scenario.iterationInTest;
  const res = http.post(`${INVENTORY_URL}/holds`, JSON.stringify({
    hold_id: `expiry-${data.id}-${n}`,
    items: [{ product_id: data.products[n % data.products.length], quantity: 1 }],
    ttl_secs: TTL_S,
  }), { headers: ADMIN_HEADERS, tags: { name: 'POST /holds' } });
  if (check(res, { 'hold applied (201)': (r) => r.status === 201 })) held.add(1);
}

function percentile(sorted, p) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] : NaN;
}

export function teardown(data) {
  const deadline = Date.now() + (TTL_S + SETTLE_TIMEOUT_S) * 1000;
  for (const productId of data.products) {
    while (getProduct(productId).held > 0 && Date.now() < deadline) sleep(1);
  }
  // Every hold id the iterations used; one whose try failed answers 404.
  const ids = [];
  for (let n = 0; n < HOLDS; n += 1) ids.push(`expiry-${data.id}-${n}`);
  const late = [];
  let others = 0;
  let first = Infinity;
  let last = -Infinity;
  for (let i = 0; i < ids.length; i += 100) {
    const answers = http.batch(ids.slice(i, i + 100).map((id) => ['GET', `${INVENTORY_URL}/holds/${id}`, null,
      { headers: ADMIN_HEADERS, tags: { name: 'GET /holds/{hold_id}' } }]));
    for (const res of answers) {
      if (res.status === 404) continue;
      const hold = res.json();
      if (hold.state !== 'EXPIRED') {
        others += 1;
        continue;
      }
      const due = parseTime(hold.expires_at);
      first = Math.min(first, due);
      last = Math.max(last, due);
      late.push(parseTime(hold.updated_at) - due);
    }
  }
  late.sort((a, b) => a - b);
  lateP50.add(percentile(late, 0.5));
  lateP99.add(percentile(late, 0.99));
  lateMax.add(late.length ? late[late.length - 1] : NaN);
  expired.add(late.length);
  notExpired.add(others);
  dueSpread.add(late.length ? (last - first) / 1000 : NaN);
}

export function handleSummary(data) {
  const value = (name, field) => (data.metrics[name] ? data.metrics[name].values[field] : undefined);
  const fixed = (name) => (value(name, 'value') !== undefined ? value(name, 'value').toFixed(1) : 'n/a');
  const report = {
    target: INVENTORY_URL,
    vus: VUS,
    holds_applied: value('holds_applied', 'count') || 0,
    holds_expired: value('holds_expired', 'value'),
    holds_not_expired: value('holds_not_expired', 'value'),
    deadlines_spread_s: fixed('deadlines_spread_s'),
    expiry_late_p50_ms: fixed('expiry_late_p50_ms'),
    expiry_late_p99_ms: fixed('expiry_late_p99_ms'),
    expiry_late_max_ms: fixed('expiry_late_max_ms'),
  };
  return summarize('hold-expiry', data, report);
}
