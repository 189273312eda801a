// flash-sale (docs/contract.md §6): one fresh product with stock 100, 2,000 orders of one unit
// from 100 VUs. Reports how long taking all orders took and how long until every order was
// terminal, and checks invariants 1-3 of docs/contract.md §4.3 for the product: exactly 100
// orders CONFIRMED, the rest REJECTED (insufficient_stock), stock 0, never negative, nothing
// left PENDING.
//
//   k6 run k6/flash-sale.js
//
// Env: ORDER_URL, INVENTORY_URL, ADMIN_TOKEN (see k6/README.md), ORDERS (default 2000),
// VUS (default 100), STOCK (default 100), SETTLE_TIMEOUT_S (how long teardown waits for every
// order to be terminal, default 120).
//
// How the run finds its orders: VUs cannot hand state to teardown, so every order of the run is
// placed for one user id unique to the run (the run's start in ms), and teardown lists exactly
// those through GET /orders?user_id=...&after=... . The checks become thresholds on custom
// metrics, so a broken invariant fails the run (k6 exits 99) and still prints the summary.

import http from 'k6/http';
import { check, sleep } from 'k6';
import { Counter, Gauge, Rate } from 'k6/metrics';
import {
  ADMIN_HEADERS, ORDER_URL, INVENTORY_URL, SUMMARY_TREND_STATS, createProduct, getProduct, listOrders, parseTime,
  placeOrder, runId, summarize, userHeaders,
} from './lib/common.js';

const ORDERS = parseInt(__ENV.ORDERS || '2000', 10);
const VUS = parseInt(__ENV.VUS || '100', 10);
const STOCK = parseInt(__ENV.STOCK || '100', 10);
const SETTLE_TIMEOUT_S = parseInt(__ENV.SETTLE_TIMEOUT_S || '120', 10);
const TERMINAL = ['CONFIRMED', 'REJECTED', 'CANCELLED'];
// With the defaults: 100 confirmed, stock 0. (Smaller ORDERS, for a quick try, expect less.)
const EXPECT_CONFIRMED = Math.min(ORDERS, STOCK);
const EXPECT_STOCK = STOCK - EXPECT_CONFIRMED;

const ordersCreated = new Counter('orders_created');
const invariantOk = new Rate('flash_invariants_ok');
const createSeconds = new Gauge('flash_create_seconds');
const settleSeconds = new Gauge('flash_settle_seconds');
const confirmed = new Gauge('flash_confirmed');
const rejected = new Gauge('flash_rejected');
const pending = new Gauge('flash_pending');
const finalStock = new Gauge('flash_final_stock');

export const options = {
  scenarios: {
    flash_sale: { executor: 'shared-iterations', vus: VUS, iterations: ORDERS, maxDuration: '5m' },
  },
  thresholds: {
    orders_created: [`count==${ORDERS}`],
    flash_invariants_ok: ['rate==1'],
    flash_confirmed: [`value==${EXPECT_CONFIRMED}`],
    flash_final_stock: [`value==${EXPECT_STOCK}`],
    http_req_failed: ['rate<0.01'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
  teardownTimeout: `${SETTLE_TIMEOUT_S + 120}s`,
};

export function setup() {
  const id = runId();
  // A product id nobody used before, so stock, restocks and deductions are this run's alone.
  if (createProduct(id, `flash sale ${id}`, STOCK) !== 201) {
    throw new Error(`product ${id} already exists; run again`);
  }
  return { productId: id, userId: id };
}

export default function (data) {
  const res = placeOrder(data.userId, data.productId, 1);
  if (check(res, { 'order accepted (202)': (r) => r !== null && r.status === 202 })) {
    ordersCreated.add(1);
  }
}

// Records one invariant: a check (shown per name in the summary) and a sample of the rate
// the threshold watches.
function expect(name, ok, detail) {
  check(null, { [name]: () => ok });
  invariantOk.add(ok, { invariant: name });
  if (!ok) console.error(`invariant broken: ${name}: ${detail}`);
}

export function teardown(data) {
  try {
    verify(data);
  } catch (e) {
    // Make sure the threshold fails even if verification itself blew up.
    invariantOk.add(false, { invariant: 'verification ran' });
    throw e;
  }
}

function verify(data) {
  // Invariant 3: every order reaches a terminal state. Poll the cheap question (any PENDING
  // order left for this user?) with a deadline, never sleep-and-hope.
  const deadline = Date.now() + SETTLE_TIMEOUT_S * 1000;
  for (;;) {
    const res = http.get(`${ORDER_URL}/orders?user_id=${data.userId}&status=PENDING&limit=1`,
      { headers: userHeaders(data.userId), tags: { name: 'GET /orders' } });
    if (res.status === 200 && res.json('items').length === 0) break;
    if (Date.now() > deadline) break;
    sleep(0.2);
  }

  const orders = listOrders(data.userId);
  const byStatus = { PENDING: 0, CONFIRMED: 0, REJECTED: 0, CANCELLED: 0 };
  let firstCreated = Infinity;
  let lastCreated = -Infinity;
  let lastSettled = -Infinity;
  let confirmedUnits = 0;
  let badReasons = 0;
  for (const o of orders) {
    byStatus[o.status] = (byStatus[o.status] || 0) + 1;
    const created = parseTime(o.created_at);
    firstCreated = Math.min(firstCreated, created);
    lastCreated = Math.max(lastCreated, created);
    if (TERMINAL.includes(o.status)) lastSettled = Math.max(lastSettled, parseTime(o.updated_at));
    if (o.status === 'CONFIRMED') confirmedUnits += o.items.reduce((sum, item) => sum + item.quantity, 0);
    if (o.status === 'REJECTED' && o.rejection_reason !== 'insufficient_stock') badReasons++;
  }
  const product = getProduct(data.productId);
  const stock = product ? product.stock : NaN;

  // Timings come from the orders' own timestamps (PostgreSQL's clock), not from k6's:
  // first created_at -> last created_at, and first created_at -> last settlement.
  if (orders.length > 0) {
    createSeconds.add((lastCreated - firstCreated) / 1000);
    settleSeconds.add((lastSettled - firstCreated) / 1000);
  }
  confirmed.add(byStatus.CONFIRMED);
  rejected.add(byStatus.REJECTED);
  pending.add(byStatus.PENDING);
  finalStock.add(stock);

  // Cross-check with inventory: each confirmed order holds an APPLIED reservation.
  let unapplied = 0;
  for (const o of orders.filter((x) => x.status === 'CONFIRMED')) {
    // The admin token: inventory may keep reservations to it (RESERVATIONS_REQUIRE_ADMIN).
    const r = http.get(`${INVENTORY_URL}/reservations/${o.order_id}`,
      { headers: ADMIN_HEADERS, tags: { name: 'GET /reservations/{id}' } });
    if (r.status !== 200 || r.json('state') !== 'APPLIED') unapplied++;
  }

  expect('every order of the run is listed', orders.length === ORDERS,
    `${orders.length} listed, ${ORDERS} placed`);
  expect('invariant 3: no order left PENDING', byStatus.PENDING === 0,
    `${byStatus.PENDING} still PENDING after ${SETTLE_TIMEOUT_S}s`);
  expect(`exactly ${EXPECT_CONFIRMED} orders CONFIRMED`, byStatus.CONFIRMED === EXPECT_CONFIRMED,
    `${byStatus.CONFIRMED} CONFIRMED`);
  expect('the others REJECTED for insufficient_stock',
    byStatus.REJECTED === orders.length - byStatus.CONFIRMED && badReasons === 0,
    `${byStatus.REJECTED} REJECTED, ${badReasons} with another reason, ${byStatus.CANCELLED} CANCELLED`);
  expect(`stock is ${EXPECT_STOCK}`, stock === EXPECT_STOCK, `stock ${stock}`);
  expect('invariant 2: stock is not negative', stock >= 0, `stock ${stock}`);
  // Invariant 1 for this product: initial stock + restocks (none) - final stock
  // = units of confirmed, not cancelled orders + applied direct deductions (none).
  expect('invariant 1: initial - final stock = confirmed units', STOCK - stock === confirmedUnits,
    `${STOCK} - ${stock} != ${confirmedUnits}`);
  expect('every CONFIRMED order has an APPLIED reservation', unapplied === 0,
    `${unapplied} without an APPLIED reservation`);
}

export function handleSummary(data) {
  const value = (name, field) => (data.metrics[name] ? data.metrics[name].values[field] : undefined);
  const seconds = (name) => (value(name, 'value') !== undefined ? value(name, 'value').toFixed(3) : 'n/a');
  const report = {
    target: `${ORDER_URL} (inventory ${INVENTORY_URL})`,
    orders_placed: value('orders_created', 'count') || 0,
    vus: VUS,
    stock: STOCK,
    time_to_create_all_s: seconds('flash_create_seconds'),
    time_until_all_terminal_s: seconds('flash_settle_seconds'),
    confirmed: value('flash_confirmed', 'value'),
    rejected: value('flash_rejected', 'value'),
    pending: value('flash_pending', 'value'),
    final_stock: value('flash_final_stock', 'value'),
    invariants: value('flash_invariants_ok', 'rate') === 1 ? 'all hold' : 'BROKEN (see the log above)',
  };
  return summarize('flash-sale', data, report);
}
