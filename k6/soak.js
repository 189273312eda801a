// soak: mixed load on several instances of each service while faults are injected
// (scripts/soak.sh runs it; it is not a benchmark). Each iteration does one of:
//   - place an order (1–2 random products, 1–3 units each) and, one time in five, cancel it;
//   - a direct deduction of one unit (POST /deductions);
//   - a restock of a few units (POST /products/{id}/restock with an Idempotency-Key).
// A request that fails for a reason a fault explains (no connection, 5xx, 409 in progress) is
// sent again with the same idempotency token, deduction id or restock key, to another instance:
// exactly what a well-behaved client does, and what the guarantees must absorb. A replayed
// order must carry the first order id; a mismatch is counted and fails the soak.
//
// Env: ORDER_URLS, INVENTORY_URLS (comma-separated base URLs), ADMIN_TOKEN, PRODUCTS (ids
// 1..PRODUCTS, created by the caller), VUS (default 8), DURATION (default 600s).

import http from 'k6/http';
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';

const ORDER_URLS = (__ENV.ORDER_URLS || 'http://127.0.0.1:8080').split(',');
const INVENTORY_URLS = (__ENV.INVENTORY_URLS || 'http://127.0.0.1:8081').split(',');
const ADMIN = { 'Content-Type': 'application/json', Authorization: `Bearer ${__ENV.ADMIN_TOKEN || 'dev-admin-token'}` };
const JSON_HEADERS = { 'Content-Type': 'application/json' };
const PRODUCTS = parseInt(__ENV.PRODUCTS || '20', 10);
const ATTEMPTS = 20;

const ordersPlaced = new Counter('soak_orders_placed');
const ordersCancelled = new Counter('soak_orders_cancelled');
const deductions = new Counter('soak_deductions');
const restocks = new Counter('soak_restocks');
const replayMismatches = new Counter('soak_replay_mismatches');
const gaveUp = new Counter('soak_gave_up');

export const options = {
  scenarios: {
    soak: { executor: 'constant-vus', vus: parseInt(__ENV.VUS || '8', 10), duration: __ENV.DURATION || '600s' },
  },
  // Faults make some requests fail on purpose; what counts is checked by soak.sh afterwards.
  summaryTrendStats: ['med', 'p(99)', 'max'],
};

const pick = (list) => list[Math.floor(Math.random() * list.length)];
const retryable = (res) => res.status === 0 || res.status >= 500 || res.status === 429
  || (res.status === 409 && String(res.body).includes('request-in-progress'));

/** Sends `send(baseUrl)` until it is answered with something other than a fault, or gives up. */
function persist(urls, send) {
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const res = send(pick(urls));
    if (!retryable(res)) return res;
    sleep(Math.min(0.05 * 2 ** attempt, 1));
  }
  gaveUp.add(1);
  return null;
}

function placeAndMaybeCancel() {
  const token = persist(ORDER_URLS, (base) => http.post(`${base}/idempotency-tokens`, null, { timeout: '10s' }));
  if (token === null || token.status !== 201) return;
  const first = 1 + Math.floor(Math.random() * PRODUCTS);
  const items = [{ product_id: first, quantity: 1 + Math.floor(Math.random() * 3) }];
  if (Math.random() < 0.3) {
    const second = 1 + (first % PRODUCTS);
    items.push({ product_id: second, quantity: 1 + Math.floor(Math.random() * 3) });
  }
  const body = JSON.stringify({ user_id: 1 + Math.floor(Math.random() * 1000), items, amount: '9.90' });
  const headers = { ...JSON_HEADERS, 'Idempotency-Key': token.json('token') };
  let orderId = null;
  const placed = persist(ORDER_URLS, (base) => {
    const res = http.post(`${base}/orders`, body, { headers, timeout: '10s' });
    if (res.status === 202) {
      const id = res.json('order_id');
      if (orderId !== null && id !== orderId) replayMismatches.add(1);
      orderId = orderId || id;
    }
    return res;
  });
  if (placed === null || placed.status !== 202) return;
  ordersPlaced.add(1);
  // The same request once more: it must replay the same order.
  const again = http.post(`${pick(ORDER_URLS)}/orders`, body, { headers, timeout: '10s' });
  if (again.status === 202 && again.json('order_id') !== orderId) replayMismatches.add(1);
  if (Math.random() < 0.2) {
    sleep(Math.random() * 0.2);
    const cancelled = persist(ORDER_URLS, (base) => http.post(`${base}/orders/${orderId}/cancel`, null, { timeout: '10s' }));
    if (cancelled !== null && cancelled.status === 200) ordersCancelled.add(1);
  }
}

function deduct() {
  const body = JSON.stringify({
    deduction_id: `soak-${__VU}-${__ITER}-${Date.now()}`,
    items: [{ product_id: 1 + Math.floor(Math.random() * PRODUCTS), quantity: 1 }],
  });
  const res = persist(INVENTORY_URLS, (base) => http.post(`${base}/deductions`, body, { headers: ADMIN, timeout: '10s' }));
  if (res !== null && res.status === 200) deductions.add(1);
}

function restock() {
  const product = 1 + Math.floor(Math.random() * PRODUCTS);
  const headers = { ...ADMIN, 'Idempotency-Key': `soak-restock-${__VU}-${__ITER}-${Date.now()}` };
  const body = JSON.stringify({ quantity: 1 + Math.floor(Math.random() * 5) });
  const res = persist(INVENTORY_URLS, (base) => http.post(`${base}/products/${product}/restock`, body, { headers, timeout: '10s' }));
  if (res !== null && res.status === 200) restocks.add(1);
}

export default function () {
  const roll = Math.random();
  if (roll < 0.8) placeAndMaybeCancel();
  else if (roll < 0.95) deduct();
  else restock();
  sleep(0.02);
}
