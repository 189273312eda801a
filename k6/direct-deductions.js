// direct-deductions (docs/contract.md §6): 50 VUs hammer POST /deductions on one hot product,
// one unit per request, each with its own deduction id. Measures the synchronous "flash sale"
// path of inventory-service (Redis lock + conditional update + idempotency row) on a single
// row, the worst case for contention. Compare deductions/s with pgbench's bare update on one
// hot row (k6/pgbench/stock-update.sql, scripts/bench.sh): that is PostgreSQL's own ceiling.
//
//   k6 run k6/direct-deductions.js
//
// Env: INVENTORY_URL, ADMIN_TOKEN (see k6/README.md), VUS (default 50), DURATION (default 30s),
// PRODUCT_ID (default: a fresh id per run).

import http from 'k6/http';
import { check } from 'k6';
import { Counter, Gauge, Trend } from 'k6/metrics';
import {
  INVENTORY_URL, ADMIN_TOKEN, SUMMARY_TREND_STATS, createProduct, durationSeconds, getProduct, runId, summarize,
} from './lib/common.js';

const VUS = parseInt(__ENV.VUS || '50', 10);
const DURATION = __ENV.DURATION || '30s';
// The most a product may start with; no run here comes near using it up.
const INITIAL_STOCK = 1000000000;

const applied = new Counter('deductions_applied');
const refused = new Counter('deductions_refused');
const deductionTime = new Trend('deduction_duration', true);
// handleSummary sees only metrics, so teardown hands it the stock figures this way.
const initialStock = new Gauge('deduction_initial_stock');
const finalStock = new Gauge('deduction_final_stock');

export const options = {
  scenarios: { hot_product: { executor: 'constant-vus', vus: VUS, duration: DURATION } },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
};

export function setup() {
  const id = runId();
  const productId = parseInt(__ENV.PRODUCT_ID || String(id), 10);
  if (createProduct(productId, `hot product ${id}`, INITIAL_STOCK) === 409) {
    console.warn(`product ${productId} already existed; its stock is not reset`);
  }
  return { id, productId, initialStock: getProduct(productId).stock };
}

export default function (data) {
  const res = http.post(`${INVENTORY_URL}/deductions`, JSON.stringify({
    deduction_id: `bench-${data.id}-${__VU}-${__ITER}`,
    items: [{ product_id: data.productId, quantity: 1 }],
  }), {
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN_TOKEN}` },
    tags: { name: 'POST /deductions' },
  });
  deductionTime.add(res.timings.duration);
  if (check(res, { 'deduction applied (200)': (r) => r.status === 200 })) applied.add(1);
  else refused.add(1, { status: String(res.status) });
}

export function teardown(data) {
  initialStock.add(data.initialStock);
  finalStock.add(getProduct(data.productId).stock);
}

export function handleSummary(data) {
  const seconds = durationSeconds(DURATION);
  const value = (name, field) => (data.metrics[name] ? data.metrics[name].values[field] : undefined);
  const count = value('deductions_applied', 'count') || 0;
  const initial = value('deduction_initial_stock', 'value');
  const final = value('deduction_final_stock', 'value');
  const consumed = initial !== undefined && final !== undefined ? initial - final : 'n/a';
  const report = {
    target: INVENTORY_URL,
    vus: VUS,
    duration_s: seconds,
    deductions_applied: count,
    deductions_refused: value('deductions_refused', 'count') || 0,
    deductions_per_s: (count / seconds).toFixed(1),
    deduction_p99_ms: value('deduction_duration', 'p(99)') !== undefined ? value('deduction_duration', 'p(99)').toFixed(1) : 'n/a',
    // Invariant 1 for this product: what left the stock is exactly what was answered 200.
    stock_consumed: consumed,
    stock_matches_applied: consumed === count ? 'yes' : 'NO',
  };
  return summarize('direct-deductions', data, report);
}
