// Shared by the k6 scripts: base URLs, the admin and order API calls they all make, parsing
// the services' timestamps, and the end-of-test summary (text on stdout, JSON in k6/results/).
//
// The summary is written here rather than with k6's jslib `textSummary`, because jslib is
// downloaded at run time from the internet and the benchmark machines have no internet.

import http from 'k6/http';
import { fail } from 'k6';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';

export const ORDER_URL = (__ENV.ORDER_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
export const INVENTORY_URL = (__ENV.INVENTORY_URL || 'http://127.0.0.1:8081').replace(/\/+$/, '');
export const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || 'dev-admin-token';

// With end-user identity on in order-service, give k6 the same AUTH_JWT_SECRET (and
// AUTH_JWT_ISSUER / AUTH_JWT_AUDIENCE when the service checks them): each user's requests then
// carry an HS256 token minted here for that user. Unset: no Authorization header is sent.
const AUTH_JWT_SECRET = __ENV.AUTH_JWT_SECRET || '';
const AUTH_JWT_ISSUER = __ENV.AUTH_JWT_ISSUER || '';
const AUTH_JWT_AUDIENCE = __ENV.AUTH_JWT_AUDIENCE || '';
export const IDENTITY_ON = AUTH_JWT_SECRET !== '';
const TOKEN_LIFETIME_S = 3600;

const JSON_HEADERS = { 'Content-Type': 'application/json' };
export const ADMIN_HEADERS = { 'Content-Type': 'application/json', Authorization: `Bearer ${ADMIN_TOKEN}` };

// Statuses that are answers, not failures, for http_req_failed (e.g. a 404 while checking
// whether a product exists must not count against the error-rate threshold).
const OK_OR_MISSING = http.expectedStatuses(200, 404);
const CREATED_OR_EXISTS = http.expectedStatuses(201, 409);

/** Whole seconds of a k6 duration string such as "30s", "1m30s" or "500ms". */
export function durationSeconds(text) {
  const units = { ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let match;
  let consumed = '';
  while ((match = re.exec(text)) !== null) {
    total += parseFloat(match[1]) * units[match[2]];
    consumed += match[0];
  }
  if (consumed !== text) fail(`cannot read the duration ${JSON.stringify(text)} (use e.g. 30s or 2m)`);
  return total;
}

/**
 * Milliseconds since the epoch of an RFC 3339 timestamp as the services write them
 * ("2026-11-29T12:00:00.123456Z"). The JS engine's Date.parse wants at most milliseconds,
 * so the fraction is cut to three digits first.
 */
export function parseTime(text) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  if (!m) fail(`unexpected timestamp ${JSON.stringify(text)}`);
  const millis = ((m[2] || '') + '000').slice(0, 3);
  return Date.parse(`${m[1]}.${millis}${m[3] === '+00:00' ? 'Z' : m[3]}`);
}

/** A fresh id for this run: milliseconds since the epoch, positive and unique per run. */
export function runId() {
  return Date.now();
}

/** POST /products; 201 created, 409 already there. Anything else stops the test. */
export function createProduct(productId, name, stock) {
  const res = http.post(`${INVENTORY_URL}/products`,
    JSON.stringify({ product_id: productId, name, stock }),
    { headers: ADMIN_HEADERS, responseCallback: CREATED_OR_EXISTS, tags: { name: 'POST /products' } });
  if (res.status !== 201 && res.status !== 409) {
    fail(`creating product ${productId} answered ${res.status}: ${res.body}`);
  }
  return res.status;
}

/** GET /products/{id}: the product, or null when it does not exist. */
export function getProduct(productId) {
  const res = http.get(`${INVENTORY_URL}/products/${productId}`,
    { responseCallback: OK_OR_MISSING, tags: { name: 'GET /products/{id}' } });
  if (res.status === 404) return null;
  if (res.status !== 200) fail(`reading product ${productId} answered ${res.status}: ${res.body}`);
  return res.json();
}

/**
 * Makes sure products `first..last` exist with at least `minStock` units: creates the missing
 * ones with `createStock` units and restocks the low ones. Reads in parallel batches, so a
 * thousand products take a second or two, not a minute.
 */
export function ensureProducts(first, last, createStock, minStock) {
  const batch = 50;
  let created = 0;
  let restocked = 0;
  for (let start = first; start <= last; start += batch) {
    const ids = [];
    for (let id = start; id <= Math.min(last, start + batch - 1); id++) ids.push(id);
    const answers = http.batch(ids.map((id) => ['GET', `${INVENTORY_URL}/products/${id}`, null,
      { responseCallback: OK_OR_MISSING, tags: { name: 'GET /products/{id}' } }]));
    answers.forEach((res, i) => {
      const id = ids[i];
      if (res.status === 404) {
        createProduct(id, `Benchmark product ${id}`, createStock);
        created++;
      } else if (res.status === 200) {
        let stock = res.json('stock');
        // A restock adds at most 1,000,000 units (docs/contract.md §3.2), so top up in steps.
        while (stock < minStock) {
          const add = Math.min(1000000, minStock - stock);
          const r = http.post(`${INVENTORY_URL}/products/${id}/restock`, JSON.stringify({ quantity: add }),
            { headers: ADMIN_HEADERS, tags: { name: 'POST /products/{id}/restock' } });
          if (r.status !== 200) fail(`restocking product ${id} answered ${r.status}: ${r.body}`);
          stock = r.json('stock');
          restocked++;
        }
      } else {
        fail(`reading product ${id} answered ${res.status}: ${res.body}`);
      }
    });
  }
  return { created, restocked };
}

function base64url(text) {
  return encoding.b64encode(text, 'rawurl');
}

/** An HS256 JWT for `userId` (`sub` as a string, as order-service requires). */
export function mintToken(userId) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: String(userId), iat: now, exp: now + TOKEN_LIFETIME_S };
  if (AUTH_JWT_ISSUER) claims.iss = AUTH_JWT_ISSUER;
  if (AUTH_JWT_AUDIENCE) claims.aud = AUTH_JWT_AUDIENCE;
  const signed = `${base64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${base64url(JSON.stringify(claims))}`;
  return `${signed}.${crypto.hmac('sha256', AUTH_JWT_SECRET, signed, 'base64rawurl')}`;
}

// Per VU (each VU has its own copy of this module): one token per user, minted again when
// it has less than a tenth of its life left.
const tokens = {};

/** The headers that authenticate `userId` to order-service: none with identity off. */
export function userHeaders(userId) {
  if (!IDENTITY_ON) return {};
  const now = Date.now() / 1000;
  let held = tokens[userId];
  if (!held || held.renewAt <= now) {
    held = { jwt: mintToken(userId), renewAt: now + TOKEN_LIFETIME_S * 0.9 };
    tokens[userId] = held;
  }
  return { Authorization: `Bearer ${held.jwt}` };
}

/**
 * One customer action: take an idempotency token, then create an order with it.
 * Returns the order POST's response (null when no token could be had).
 */
export function placeOrder(userId, productId, quantity) {
  const auth = userHeaders(userId);
  const tokenRes = http.post(`${ORDER_URL}/idempotency-tokens`, null,
    { headers: auth, tags: { name: 'POST /idempotency-tokens' } });
  if (tokenRes.status !== 201) return null;
  const body = JSON.stringify({
    user_id: userId,
    items: [{ product_id: productId, quantity }],
    amount: quantity * 10,
  });
  return http.post(`${ORDER_URL}/orders`, body, {
    headers: { ...JSON_HEADERS, ...auth, 'Idempotency-Key': tokenRes.json('token') },
    tags: { name: 'POST /orders' },
  });
}

/** Every order of `userId`, following the `next` cursor of GET /orders (newest first). */
export function listOrders(userId, status) {
  const orders = [];
  let after = null;
  for (;;) {
    let url = `${ORDER_URL}/orders?user_id=${userId}&limit=100`;
    if (status) url += `&status=${status}`;
    if (after) url += `&after=${encodeURIComponent(after)}`;
    const res = http.get(url, { headers: userHeaders(userId), tags: { name: 'GET /orders' } });
    if (res.status !== 200) fail(`listing orders answered ${res.status}: ${res.body}`);
    const page = res.json();
    orders.push(...page.items);
    if (!page.next) return orders;
    after = page.next;
  }
}

export const SUMMARY_TREND_STATS = ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'];

function fmt(value, unitMs) {
  if (typeof value !== 'number') return String(value);
  if (unitMs) return value >= 1000 ? `${(value / 1000).toFixed(2)}s` : `${value.toFixed(2)}ms`;
  return Number.isInteger(value) ? String(value) : value.toFixed(3);
}

function metricLine(name, metric) {
  const v = metric.values;
  const isTime = metric.contains === 'time';
  switch (metric.type) {
    case 'trend':
      return `${name}: ${SUMMARY_TREND_STATS.filter((s) => s in v).map((s) => `${s}=${fmt(v[s], isTime)}`).join(' ')}`;
    case 'counter':
      return `${name}: count=${v.count} rate=${v.rate.toFixed(2)}/s`;
    case 'rate':
      return `${name}: ${(v.rate * 100).toFixed(2)}% (${v.passes} of ${v.passes + v.fails})`;
    default:
      return `${name}: ${fmt(v.value, isTime)}`;
  }
}

/** The checks of a group and all its subgroups (setup and teardown have their own). */
function allChecks(group) {
  if (!group) return [];
  return (group.checks || []).concat(...(group.groups || []).map(allChecks));
}

/**
 * What handleSummary returns: a text summary on stdout (the script's own `report` lines
 * first, then every metric with its thresholds) and the whole summary plus the report as
 * JSON in k6/results/<script>-<timestamp>.json (or $SUMMARY_FILE, which scripts/bench.sh
 * sets so it knows where to read).
 */
export function summarize(script, data, report) {
  const lines = [`\n== ${script} ==`];
  for (const [label, value] of Object.entries(report)) lines.push(`  ${label}: ${value}`);
  lines.push('', '  checks:');
  for (const c of allChecks(data.root_group)) {
    lines.push(`    ${c.fails === 0 ? 'ok  ' : 'FAIL'} ${c.name} (${c.passes} passed, ${c.fails} failed)`);
  }
  lines.push('', '  metrics:');
  let failed = 0;
  for (const name of Object.keys(data.metrics).sort()) {
    const metric = data.metrics[name];
    lines.push(`    ${metricLine(name, metric)}`);
    for (const [expr, result] of Object.entries(metric.thresholds || {})) {
      lines.push(`      ${result.ok ? 'ok  ' : 'FAIL'} threshold ${expr}`);
      if (!result.ok) failed++;
    }
  }
  lines.push('', failed === 0 ? '  all thresholds passed' : `  ${failed} threshold(s) FAILED`, '');

  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const file = __ENV.SUMMARY_FILE || `${__ENV.RESULTS_DIR || 'k6/results'}/${script}-${stamp}.json`;
  lines.push(`  JSON summary: ${file}`, '');
  return {
    stdout: lines.join('\n'),
    [file]: JSON.stringify({ script, finished_at: new Date().toISOString(), report, ...data }, null, 2),
  };
}
