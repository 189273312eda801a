// create-orders (docs/contract.md §6): each iteration takes an idempotency token and creates an
// order for one unit of a random product among 1..1000. Measures order-service's intake:
// orders/s and the latency of POST /orders. Orders settle asynchronously; that part is
// flash-sale's to measure.
//
//   k6 run k6/create-orders.js                    # 20 VUs for 30 s
//   VUS=50 DURATION=60s k6 run k6/create-orders.js
//   RATE=600 VUS=50 k6 run k6/create-orders.js   # 600 iterations/s offered, whatever the answers
//
// Env: ORDER_URL, INVENTORY_URL, ADMIN_TOKEN, AUTH_JWT_SECRET (see k6/README.md), VUS (20 or 50; default 20),
// DURATION (default 30s), P99_MS (threshold on the order POST's p99, default 1000), RATE
// (unset: closed model, VUS loop as fast as they are answered; set: an open model at RATE
// iterations/s with VUS pre-allocated and up to 4×VUS, the way the reference design's W1
// create-orders workload does; iterations k6 could not start for want of a free VU are dropped
// and reported), SEEDED (1: skip the products check of setup(), for a caller that seeded them).
//
// setup() makes sure products 1..1000 exist with ample stock (created through inventory's
// admin API when missing, topped up when low), so no order is rejected for want of stock and
// every iteration exercises the same path.

import { check } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import {
  IDENTITY_ON, ORDER_URL, INVENTORY_URL, SUMMARY_TREND_STATS, durationSeconds, ensureProducts, placeOrder,
  summarize,
} from './lib/common.js';

const VUS = parseInt(__ENV.VUS || '20', 10);
const DURATION = __ENV.DURATION || '30s';
const P99_MS = parseInt(__ENV.P99_MS || '1000', 10);
const PRODUCTS = 1000;
// 1,000,000,000 is the most a product may start with; 100,000 left still outlasts any run here.
const CREATE_STOCK = 1000000000;
const MIN_STOCK = 100000;

const RATE = parseInt(__ENV.RATE || '0', 10);

// The two load levels of docs/contract.md §6; VUS picks one (any other count works too). With
// RATE, a constant arrival rate instead: the latency at a fixed offered load, which a closed
// model hides by slowing its own arrivals when the service slows.
const SCENARIOS = {
  vus_20: { executor: 'constant-vus', vus: 20, duration: DURATION },
  vus_50: { executor: 'constant-vus', vus: 50, duration: DURATION },
};
const SCENARIO = RATE > 0 ? `rate_${RATE}` : `vus_${VUS}`;
const SCENARIO_OPTIONS = RATE > 0
  ? {
    executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: DURATION,
    preAllocatedVUs: VUS, maxVUs: VUS * 4,
  }
  : (SCENARIOS[SCENARIO] || { executor: 'constant-vus', vus: VUS, duration: DURATION });

const ordersCreated = new Counter('orders_created');
const orderPost = new Trend('order_post_duration', true);

export const options = {
  scenarios: { [SCENARIO]: SCENARIO_OPTIONS },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    order_post_duration: [`p(99)<${P99_MS}`],
    checks: ['rate>0.99'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
  setupTimeout: '180s',
};

export function setup() {
  // SEEDED=1: the caller made sure of the products (scripts/round-trips.sh counts statements,
  // and this check's 1,000 reads would be counted with them).
  if (__ENV.SEEDED === '1') return;
  const seeded = ensureProducts(1, PRODUCTS, CREATE_STOCK, MIN_STOCK);
  console.log(`products 1..${PRODUCTS}: ${seeded.created} created, ${seeded.restocked} restocks`);
}

export default function () {
  const productId = 1 + Math.floor(Math.random() * PRODUCTS);
  // With identity on, each VU is one user with its own token (minted once, reused); off,
  // orders spread over many user ids as before.
  const userId = IDENTITY_ON ? __VU : 1 + Math.floor(Math.random() * 100000);
  const res = placeOrder(userId, productId, 1);
  const ok = check(res, { 'order accepted (202)': (r) => r !== null && r.status === 202 });
  if (res !== null) orderPost.add(res.timings.duration);
  if (ok) ordersCreated.add(1);
}

export function handleSummary(data) {
  const seconds = durationSeconds(DURATION);
  const created = data.metrics.orders_created ? data.metrics.orders_created.values.count : 0;
  const post = data.metrics.order_post_duration ? data.metrics.order_post_duration.values : {};
  const dropped = data.metrics.dropped_iterations ? data.metrics.dropped_iterations.values.count : 0;
  const offered = RATE > 0 ? RATE * seconds : null;
  const report = {
    target: `${ORDER_URL} (inventory ${INVENTORY_URL})`,
    identity: IDENTITY_ON ? 'on (HS256 bearer tokens)' : 'off',
    vus: VUS,
    rate: RATE || null,
    duration_s: seconds,
    orders_created: created,
    orders_per_s: (created / seconds).toFixed(1),
    // Open model only: iterations k6 never started (no free VU), and the share of the offered
    // orders that were accepted, dropped ones counting against it.
    dropped_iterations: dropped,
    accepted_share: offered ? (created / offered).toFixed(3) : null,
    order_post_p50_ms: post.med !== undefined ? post.med.toFixed(1) : 'n/a',
    order_post_p99_ms: post['p(99)'] !== undefined ? post['p(99)'].toFixed(1) : 'n/a',
  };
  return summarize('create-orders', data, report);
}
