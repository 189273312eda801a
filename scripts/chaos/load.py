"""The chaos run's client: every request it sends is one line of history.jsonl.

A history record:

    {"seq": 12, "op": "deduction", "worker": 3, "instance": "inventory-1",
     "t0": 81.2031, "t1": 81.2190,              # time.monotonic() at send and at answer
     "w0": "2026-12-02T18:01:02.123456Z", "w1": "...",   # the same, wall clock (UTC)
     "req": {"method": "POST", "path": "/deductions", "body": "{...}", "key": "d-7-3-12"},
     "outcome": "ok" | "fail" | "unknown",
     "status": 200, "replayed": false, "body": "<the answer's body, as received>",
     "error": null}

`outcome`: `ok` is a 2xx; `fail` a definite refusal (a 4xx, or a connection refused before
a byte was sent, `status` null and `error` "refused"); `unknown` a 5xx, a timeout or a
connection broken after the request was sent: it may or may not have taken effect.
`key` names the logical operation the request belongs to (idempotency token, deduction id,
restock key, order id, hold id); every attempt of one operation carries the same key.

Besides requests, the history holds records the checker only reports: `meta` (seed, settings),
`fault` (what was done when), `rss` (memory of each instance).

The workers (Python threads, standard library only) each draw their mix from
random.Random(f"{seed}-{worker}"): token + order creation, deliberate replays of an order's
token and body, cancels of their own orders, direct deductions (and replays of their ids),
holds (tries, replays of them, confirms, cancels, cancels before the try, short TTLs left to
expire), restocks with an Idempotency-Key, product reads and order reads; with a payment
window, confirms of the orders seen AWAITING_PAYMENT (most in time, some left to expire). Timing differs from run to
run; the choices a worker makes do not.
"""

import datetime
import http.client
import json
import random
import socket
import threading
import time

import check

TIMEOUT = 6.0


def wall():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class History:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.seq = 0
        self.counts = {"requests": 0, "unknown": 0}

    def write(self, record):
        with self.lock:
            self.seq += 1
            record["seq"] = self.seq
            if "outcome" in record:
                self.counts["requests"] += 1
                if record["outcome"] == "unknown":
                    self.counts["unknown"] += 1
            self.file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def note(self, op, **fields):
        self.write({"op": op, "t0": time.monotonic(), "w0": wall(), **fields})

    def close(self):
        self.file.close()


class Client:
    """Sends requests to the instances and records each one."""

    def __init__(self, history, instances, admin_token):
        self.history = history
        self.instances = instances  # name -> port
        self.admin = admin_token

    def request(self, op, instance, method, path, body=None, key=None, headers=None,
                admin=False, worker=None, timeout=TIMEOUT):
        port = self.instances[instance]
        send_headers = {"content-type": "application/json"} if body is not None else {}
        if admin:
            send_headers["authorization"] = f"Bearer {self.admin}"
        send_headers.update(headers or {})
        raw = None if body is None else json.dumps(body, separators=(",", ":"))
        record = {"op": op, "worker": worker, "instance": instance,
                  "req": {"method": method, "path": path, "body": raw, "key": key},
                  "status": None, "replayed": False, "body": None, "error": None}
        record["t0"], record["w0"] = time.monotonic(), wall()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        sent = False
        try:
            conn.connect()
            sent = True
            conn.request(method, path, body=raw, headers=send_headers)
            response = conn.getresponse()
            data = response.read()
            record["status"] = response.status
            record["replayed"] = response.getheader("idempotent-replayed") == "true"
            record["body"] = data.decode("utf-8", "replace")
            if 200 <= response.status < 300:
                record["outcome"] = "ok"
            elif 400 <= response.status < 500:
                record["outcome"] = "fail"
            else:
                record["outcome"] = "unknown"
        except ConnectionRefusedError:
            record["outcome"] = "unknown" if sent else "fail"
            record["error"] = "refused"
        except (socket.timeout, TimeoutError):
            record["outcome"], record["error"] = "unknown", "timeout"
        except (OSError, http.client.HTTPException) as error:
            record["outcome"], record["error"] = "unknown", f"{type(error).__name__}: {error}"
        finally:
            conn.close()
        record["t1"], record["w1"] = time.monotonic(), wall()
        self.history.write(record)
        return record


def problem_type(record):
    try:
        return json.loads(record["body"]).get("type", "").rsplit("/", 1)[-1]
    except (TypeError, ValueError, AttributeError):
        return ""


def settled(record):
    """Whether an attempt gave the operation's outcome (no need to send it again)."""
    if record["outcome"] == "unknown":
        return False
    if record["status"] in (409, 429) and problem_type(record) in ("request-in-progress", "rate-limited", "busy"):
        return False
    return record["error"] != "refused"


class Operation:
    """One logical operation (its attempts share a key); kept until it has settled."""

    def __init__(self, op, service, method, path, body, key, admin, headers=None):
        self.op, self.service, self.method, self.path = op, service, method, path
        self.body, self.key, self.admin, self.headers = body, key, admin, headers
        self.last = None

    def send(self, client, instance, worker=None, op=None):
        self.last = client.request(op or self.op, instance, self.method, self.path, self.body,
                                   self.key, self.headers, self.admin, worker)
        return self.last


class Load:
    def __init__(self, client, seed, products, hot, order_instances, inventory_instances, workers,
                 payment_window=None):
        self.client = client
        self.seed = seed
        self.products = products  # ids
        self.hot = hot
        self.orders_at = order_instances
        self.inventory_at = inventory_instances
        self.workers = workers
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.unsettled = []  # Operations the load left without an outcome
        self.users = [1000 + w for w in range(workers)]
        self.payment_window = payment_window  # seconds, or None: no POST /orders/{id}/confirm
        self.holds = []  # every hold_id tried, for the final reads
        self.leftover = []  # hold ends planned but not sent when the load stopped

    def run(self):
        threads = [threading.Thread(target=self.worker, args=(w,), daemon=True) for w in range(self.workers)]
        for thread in threads:
            thread.start()
        return threads

    def product(self, rng):
        return rng.choice(self.hot) if rng.random() < 0.6 else rng.choice(self.products)

    def items(self, rng):
        first = self.product(rng)
        items = [{"product_id": first, "quantity": rng.randint(1, 3)}]
        if rng.random() < 0.25:
            second = rng.choice([p for p in self.products if p != first])
            items.append({"product_id": second, "quantity": rng.randint(1, 3)})
        return sorted(items, key=lambda item: item["product_id"])

    def persist(self, operation, rng, worker, instances, attempts=6):
        """Sends until settled, another instance each time; leaves it for later if stopped."""
        for attempt in range(attempts):
            record = operation.send(self.client, rng.choice(instances), worker)
            if settled(record):
                return record
            if self.stop.is_set():
                break
            time.sleep(min(0.2 * 2 ** attempt, 2.0) * (0.5 + rng.random()))
        with self.lock:
            self.unsettled.append(operation)
        return None

    def worker(self, w):
        rng = random.Random(f"{self.seed}-{w}")
        user = self.users[w]
        n = 0
        mine = []  # acknowledged orders: (operation, order_id)
        cancelled = set()
        deductions = []
        tries = []  # hold tries sent: Operations, for replays
        plans = []  # (when, n, kind, detail): hold ends and order confirms to do later
        while not self.stop.is_set():
            n += 1
            plans.sort(key=lambda plan: plan[:2])
            if plans and plans[0][0] <= time.monotonic():
                self.planned(plans, plans.pop(0), rng, w)
                time.sleep(rng.uniform(0.01, 0.06))
                continue
            roll = rng.random()
            if roll < 0.32:
                token = Operation("token", "order", "POST", "/idempotency-tokens", None, None, False)
                got = self.persist(token, rng, w, self.orders_at, attempts=4)
                if got is None or got["status"] != 201:
                    continue
                key = json.loads(got["body"])["token"]
                # The amount tags the order: unique per worker and token, so an order in the
                # final listing can be traced to the request that asked for it.
                body = {"user_id": user, "items": self.items(rng), "amount": f"{n}.{w:02d}"}
                order = Operation("order_create", "order", "POST", "/orders", body, key, False,
                                  {"idempotency-key": key})
                got = self.persist(order, rng, w, self.orders_at)
                if got is not None and got["status"] == 202:
                    order_id = json.loads(got["body"])["order_id"]
                    mine.append((order, order_id))
                    if self.payment_window:
                        # Most are confirmed once seen AWAITING_PAYMENT; the rest are left to expire.
                        plan = "confirm" if rng.random() < 0.85 else "expire"
                        plans.append((time.monotonic() + rng.uniform(0.2, 0.6), n, "order_look", (order_id, plan, 0)))
            elif roll < 0.37 and mine:
                order, _ = rng.choice(mine)
                order.send(self.client, rng.choice(self.orders_at), w, op="order_replay")
            elif roll < 0.43 and mine:
                _, order_id = rng.choice(mine)
                if order_id in cancelled:
                    continue
                cancelled.add(order_id)
                cancel = Operation("order_cancel", "order", "POST", f"/orders/{order_id}/cancel", None,
                                   order_id, False)
                self.persist(cancel, rng, w, self.orders_at)
            elif roll < 0.50 and mine:
                _, order_id = rng.choice(mine[-20:])
                self.client.request("order_get", rng.choice(self.orders_at), "GET", f"/orders/{order_id}",
                                    key=order_id, worker=w)
            elif roll < 0.62:
                key = f"d-{self.seed}-{w}-{n}"
                deduction = Operation("deduction", "inventory", "POST", "/deductions",
                                      {"deduction_id": key, "items": self.items(rng)}, key, True)
                self.persist(deduction, rng, w, self.inventory_at)
                deductions.append(deduction)
            elif roll < 0.64 and deductions:
                rng.choice(deductions).send(self.client, rng.choice(self.inventory_at), w, op="deduction_replay")
            elif roll < 0.76:
                self.hold(rng, w, n, tries, plans)
            elif roll < 0.79 and tries:
                rng.choice(tries).send(self.client, rng.choice(self.inventory_at), w, op="hold_replay")
            elif roll < 0.85:
                key = f"r-{self.seed}-{w}-{n}"
                product = self.product(rng)
                restock = Operation("restock", "inventory", "POST", f"/products/{product}/restock",
                                    {"quantity": rng.randint(1, 8)}, key, True, {"idempotency-key": key})
                self.persist(restock, rng, w, self.inventory_at)
            else:
                product = rng.choice(self.products)
                self.client.request("product_get", rng.choice(self.inventory_at), "GET",
                                    f"/products/{product}", key=str(product), worker=w)
            time.sleep(rng.uniform(0.01, 0.06))
        with self.lock:
            self.leftover += [plan for plan in plans if plan[2] == "hold_end"]

    def hold(self, rng, w, n, tries, plans):
        """A hold try on the products orders and deductions use. Its fate is drawn now: most
        are confirmed, some cancelled, some left to expire (a short TTL; half of those get a
        confirm after their deadline), and some are cancelled before their try (a tombstone:
        the try must then hold nothing)."""
        hold_id = f"h-{self.seed}-{w}-{n}"
        fate = rng.choices(["confirm", "cancel", "expire", "tombstone"], [60, 15, 15, 10])[0]
        ttl = rng.randint(1, 3) if fate == "expire" else 30
        body = {"hold_id": hold_id, "items": self.items(rng), "ttl_secs": ttl}
        with self.lock:
            self.holds.append(hold_id)
        if fate == "tombstone":
            cancel = Operation("hold_cancel", "inventory", "POST", f"/holds/{hold_id}/cancel", None, hold_id, True)
            if self.persist(cancel, rng, w, self.inventory_at) is None:
                return
        try_ = Operation("hold_try", "inventory", "POST", "/holds", body, hold_id, True)
        tries.append(try_)
        got = self.persist(try_, rng, w, self.inventory_at)
        if got is None or got["status"] != 201 or fate == "tombstone":
            return
        now = time.monotonic()
        if fate == "expire":
            if rng.random() < 0.5:
                plans.append((now + ttl + rng.uniform(1.0, 2.0), n, "hold_end", (hold_id, "confirm")))
            return
        plans.append((now + rng.uniform(0.2, 2.0), n, "hold_end", (hold_id, fate)))
        if fate == "confirm" and rng.random() < 0.1:  # a cancel of a confirmed hold: 409 hold-confirmed
            plans.append((now + rng.uniform(2.5, 4.0), n, "hold_end", (hold_id, "cancel")))

    def planned(self, plans, plan, rng, w):
        _, n, kind, detail = plan
        if kind == "hold_end":
            hold_id, step = detail
            end = Operation(f"hold_{step}", "inventory", "POST", f"/holds/{hold_id}/{step}", None, hold_id, True)
            self.persist(end, rng, w, self.inventory_at)
            return
        order_id, fate, looks = detail
        if kind == "order_confirm":
            confirm = Operation("order_confirm", "order", "POST", f"/orders/{order_id}/confirm", None, order_id, False)
            got = self.persist(confirm, rng, w, self.orders_at)
            if got is not None and got["status"] == 200 and fate == "confirm" and rng.random() < 0.15:
                # The same confirm again after the window closed: still 200, never payment-window-closed.
                plans.append((time.monotonic() + self.payment_window + rng.uniform(0.5, 1.5), n, "order_confirm",
                              (order_id, "again", 0)))
            return
        got = self.client.request("order_get", rng.choice(self.orders_at), "GET", f"/orders/{order_id}",
                                  key=order_id, worker=w)
        seen = json.loads(got["body"]) if got["outcome"] == "ok" else {}
        status = seen.get("status")
        if status == "AWAITING_PAYMENT":
            if fate == "confirm":
                plans.append((time.monotonic(), n, "order_confirm", (order_id, fate, 0)))
            elif rng.random() < 0.5:
                # A confirm just after the window closed, often before the expiry has run:
                # refused 409 payment-window-closed all the same (the clock decides).
                due = check.epoch(seen.get("payment_due_at"))
                wait = (due - time.time()) if due is not None else self.payment_window
                plans.append((time.monotonic() + max(wait, 0.0) + rng.uniform(0.05, 0.8), n, "order_confirm",
                              (order_id, "late", 0)))
        elif status in (None, "PENDING") and looks < 20:
            plans.append((time.monotonic() + min(0.3 * 1.5 ** looks, 3.0), n, "order_look", (order_id, fate, looks + 1)))

    def settle(self, deadline):
        """After the load: sends every operation left without an outcome again until it has one."""
        rng = random.Random(f"{self.seed}-settle")
        # Hold ends the load planned but had no time to send: every hold is ended, so that
        # none is left HELD at quiescence.
        for _, _, _, (hold_id, step) in sorted(self.leftover, key=lambda plan: plan[:2]):
            end = Operation(f"hold_{step}", "inventory", "POST", f"/holds/{hold_id}/{step}", None, hold_id, True)
            if not settled(end.send(self.client, rng.choice(self.inventory_at), op=end.op)):
                self.unsettled.append(end)
        left = list(self.unsettled)
        while left and time.monotonic() < deadline:
            still = []
            for operation in left:
                instances = self.orders_at if operation.service == "order" else self.inventory_at
                record = operation.send(self.client, rng.choice(instances), op=operation.op)
                if not settled(record):
                    still.append(operation)
            left = still
            if left:
                time.sleep(1)
        return left
