#!/usr/bin/env python3
"""The chaos run (scripts/chaos.sh is its wrapper; docs/chaos.md says what it checks).

Private PostgreSQL, Redis and RabbitMQ; two instances of each service, each talking to each
backing service through a proxy of its own (scripts/chaos/proxy.py); a seeded schedule of
faults against all of that while scripts/chaos/load.py records every request; then quiescence,
the final reads, and scripts/chaos/check.py on the history alone.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import check  # noqa: E402
import load  # noqa: E402
import proxy  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
INSTANCES = ["order-0", "order-1", "inventory-0", "inventory-1"]
BACKINGS = ["postgres", "redis", "rabbitmq"]
KINDS = ["kill", "stop", "cut", "redis", "postgres", "rabbitmq"]
HOT = [1, 2, 3]
PRODUCTS = list(range(1, 11))
HOT_STOCK, STOCK = 30, 5000
ADMIN_TOKEN = "chaos-admin-token"
LOCK_TTL_MS = 2000
# The payment window of orders (contract §3.1.1), for a build that has it, and how often
# inventory looks for holds past their deadline (its default).
PAYMENT_WINDOW_SECS = 4
HOLD_EXPIRY_INTERVAL_MS = 500
# Seed 12's order: RabbitMQ, SIGSTOP inventory-0, kill -9 inventory-1, PostgreSQL, a cut of
# order-1 from Redis, Redis.
CI_SEED, CI_SECS, CI_EVERY = 12, 105, 15


def schedule(seed, secs, every, ci=False):
    """The faults, drawn up front from random.Random(seed): one every `every` seconds."""
    rng = random.Random(seed)
    longest = max(LOCK_TTL_MS / 1000 + 1.0, min(10.0, every - 6.0))
    times = [t for t in range(every, secs, every) if t <= secs - 5]
    kinds = []
    while len(kinds) < len(times):
        if ci:  # every kind once, in a seeded order, then again
            batch = KINDS[:]
            rng.shuffle(batch)
            kinds += batch
        else:
            kinds.append(rng.choice(KINDS))
    faults = []
    for at, kind in zip(times, kinds):
        fault = {"at": at, "kind": kind}
        if kind == "kill":
            fault.update(target=rng.choice(INSTANCES), secs=round(rng.uniform(0.5, 3.0), 1))
        elif kind == "stop":
            # Past the lock's TTL, so a paused inventory instance loses the locks it holds.
            fault.update(target=rng.choice(INSTANCES), secs=round(rng.uniform(LOCK_TTL_MS / 1000 + 0.5, longest), 1))
        elif kind == "cut":
            fault.update(target=rng.choice(INSTANCES), backing=rng.choice(BACKINGS),
                         secs=round(rng.uniform(1.0, longest), 1))
        elif kind == "postgres":
            fault.update(mode=rng.choice(["fast", "immediate"]), secs=round(rng.uniform(0.5, 3.0), 1))
        else:
            fault.update(secs=round(rng.uniform(0.5, 3.0 if kind == "redis" else 4.0), 1))
        faults.append(fault)
    return faults


class Stack:
    def __init__(self, out, bin_dir, offset):
        self.out, self.bin_dir = out, bin_dir
        self.work = tempfile.mkdtemp(prefix="chaos.", dir="/tmp")
        os.chmod(self.work, 0o755)
        # Every port below the kernel's ephemeral range (32768-60999 by default): a port in it
        # can be taken by an outgoing connection while its server is down, and the restart then
        # fails with EADDRINUSE (it happened to RabbitMQ's start_app).
        self.pg, self.redis, self.amqp = 21432 + offset, 21379 + offset, 21672 + offset
        self.ports = {name: 21080 + offset + i for i, name in enumerate(["order-0", "inventory-0", "order-1", "inventory-1"])}
        self.control = 22999 + offset
        self.proxied = {}
        for i, name in enumerate(INSTANCES):
            for j, backing in enumerate(BACKINGS):
                self.proxied[f"{name}.{backing}"] = 22000 + offset + 10 * i + j
        self.node = f"chaos{os.getpid()}@localhost"
        self.procs = {}
        self.proxy = None
        self.lock = threading.Lock()
        self.env = dict(os.environ, PG_PORT=str(self.pg), REDIS_PORT=str(self.redis), AMQP_PORT=str(self.amqp),
                        RABBIT_NODE=self.node, work=self.work, out=self.out)

    def backing(self, *args, check=True):
        return subprocess.run(["bash", os.path.join(HERE, "backing-ctl.sh"), *args], env=self.env, check=check,
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.out, "backing-ctl.log"), "a"))

    def rabbitmqctl(self, *args, check=True):
        return self.backing("rabbit_env", "rabbitmqctl", "-n", self.node, "-q", *args, check=check)

    def start_backing(self):
        self.backing("init_postgres")
        self.backing("start_postgres")
        self.backing("start_redis")
        self.backing("start_rabbit")

    def start_proxy(self):
        targets = {"postgres": self.pg, "redis": self.redis, "rabbitmq": self.amqp}
        routes = [f"{name}={port}:{targets[name.split('.')[1]]}" for name, port in self.proxied.items()]
        self.proxy = subprocess.Popen([sys.executable, os.path.join(HERE, "proxy.py"), "--control", str(self.control), *routes],
                                      stdout=open(os.path.join(self.out, "proxy.log"), "a"), stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                proxy.send(self.control, "status")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the proxy did not start")

    def start_service(self, name):
        kind, _ = name.split("-")
        database = "orders" if kind == "order" else "inventory"
        index = name.split("-")[1]
        env = {k: v for k, v in os.environ.items() if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
        env.update(
            HTTP_ADDR=f"127.0.0.1:{self.ports[name]}",
            DATABASE_URL=f"postgres://postgres@127.0.0.1:{self.proxied[name + '.postgres']}/{database}",
            REDIS_URL=f"redis://127.0.0.1:{self.proxied[name + '.redis']}/0",
            AMQP_URL=f"amqp://guest:guest@127.0.0.1:{self.proxied[name + '.rabbitmq']}/%2f",
            ADMIN_TOKEN=ADMIN_TOKEN, INVENTORY_URL=f"http://127.0.0.1:{self.ports['inventory-' + index]}",
            RECONCILE_AFTER_SECS="10", RECONCILE_EVERY_SECS="5", LOCK_TTL_MS=str(LOCK_TTL_MS), RUST_LOG="warn",
            ORDER_PAYMENT_WINDOW_SECS=str(PAYMENT_WINDOW_SECS), HOLD_EXPIRY_INTERVAL_MS=str(HOLD_EXPIRY_INTERVAL_MS))
        with open(os.path.join(self.out, f"{name}.log"), "a") as logfile:
            logfile.write(f"---- started {load.wall()}\n")
            logfile.flush()
            self.procs[name] = subprocess.Popen([os.path.join(self.bin_dir, f"{kind}-service")], env=env,
                                                stdout=logfile, stderr=subprocess.STDOUT)
        self.wait_healthy(name)

    def wait_healthy(self, name, secs=90):
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited with {self.procs[name].returncode}; see {name}.log")
            if http_ok(self.ports[name], "/healthz"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not answer /healthz within {secs} s")

    def wait_ready(self, secs=120):
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            if all(http_ok(self.ports[n], "/readyz") for n in INSTANCES):
                return True
            time.sleep(0.5)
        return False

    def rss_kib(self, name):
        try:
            with open(f"/proc/{self.procs[name].pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def inject(self, fault, log):
        kind, secs = fault["kind"], fault["secs"]
        if kind in ("kill", "stop"):
            name = fault["target"]
            proc = self.procs[name]
            if kind == "kill":
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                time.sleep(secs)
                self.start_service(name)
            else:
                proc.send_signal(signal.SIGSTOP)
                try:
                    time.sleep(secs)
                finally:
                    proc.send_signal(signal.SIGCONT)
        elif kind == "cut":
            route = f"{fault['target']}.{fault['backing']}"
            answer = proxy.send(self.control, f"cut {route} {secs}")
            if answer != "ok":
                raise RuntimeError(f"proxy: {answer}")
            time.sleep(secs + 0.2)
            proxy.send(self.control, f"restore {route}")
        elif kind == "postgres":
            self.backing("stop_postgres", fault["mode"])
            time.sleep(secs)
            self.backing("start_postgres")
        elif kind == "redis":
            self.backing("stop_redis")
            time.sleep(secs)
            self.backing("start_redis")
        elif kind == "rabbitmq":
            self.rabbitmqctl("stop_app")
            time.sleep(secs)
            self.rabbitmqctl("start_app")
        log(f"fault undone: {check.describe(fault)}")

    def undo_all(self):
        """Whatever a fault may have left: everything runs and every route is open."""
        for name in INSTANCES:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            elif proc is not None:
                self.start_service(name)
        if self.proxy is not None:
            for route in self.proxied:
                proxy.send(self.control, f"restore {route}")
        if self.backing("bash", "-c", 'redis-cli -p "$REDIS_PORT" ping', check=False).returncode:
            self.backing("start_redis", check=False)
        if self.backing("bash", "-c", 'pg_isready -q -h 127.0.0.1 -p "$PG_PORT"', check=False).returncode:
            self.backing("start_postgres", check=False)
        self.rabbitmqctl("start_app", check=False)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait()
        self.rabbitmqctl("stop", check=False)
        self.backing("stop_redis", check=False)
        self.backing("stop_postgres", "immediate", check=False)
        shutil.copy(os.path.join(self.work, "pg", "server.log"), os.path.join(self.out, "postgres.log")) \
            if os.path.exists(os.path.join(self.work, "pg", "server.log")) else None
        shutil.rmtree(self.work, ignore_errors=True)


def http_ok(port, path):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def has_payment_window(port):
    """Whether this order-service build serves POST /orders/{order_id}/confirm (its OpenAPI
    document names the path and the payment-window problem)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/openapi.json")
        response = conn.getresponse()
        if response.status != 200:
            return False
        doc = json.loads(response.read())
    except (OSError, ValueError):
        return False
    finally:
        conn.close()
    return "/orders/{order_id}/confirm" in doc.get("paths", {}) and "payment-window" in json.dumps(doc)


def list_orders(client, users, op, rng):
    """Every order of every user, page by page, each page recorded as `op`; None if a page
    could not be read."""
    orders = []
    for user in users:
        after = None
        while True:
            path = f"/orders?user_id={user}&limit=100" + (f"&after={urllib.parse.quote(after)}" if after else "")
            for _ in range(10):
                record = client.request(op, rng.choice(["order-0", "order-1"]), "GET", path, key=str(user))
                if record["outcome"] == "ok":
                    break
                time.sleep(0.5)
            else:
                return None
            page = json.loads(record["body"])
            orders += page["items"]
            after = page.get("next")
            if not after:
                break
    return orders


def quiesce(stack, client, loadgen, log, bound):
    rng = random.Random(f"{loadgen.seed}-quiesce")
    deadline = time.monotonic() + bound
    left = loadgen.settle(deadline)
    log(f"operations sent again until they had an outcome: {len(loadgen.unsettled)}; still without one: {len(left)}")
    while time.monotonic() < deadline:
        orders = list_orders(client, loadgen.users, "quiesce_list", rng)
        pending = None if orders is None else [o for o in orders if o["status"] not in check.TERMINAL]
        if pending == []:
            break
        time.sleep(2)
    log("every order terminal" if pending == [] else f"orders not terminal at the bound: {pending and len(pending)}")
    cancelled = [o["order_id"] for o in orders or [] if o["status"] in ("CANCELLED", "EXPIRED")]
    while cancelled and time.monotonic() < deadline:
        still = []
        for order_id in cancelled:
            record = client.request("reservation_get", rng.choice(["inventory-0", "inventory-1"]), "GET",
                                    f"/reservations/{order_id}", key=order_id)
            if record["outcome"] != "ok" or json.loads(record["body"]).get("state") == "APPLIED":
                still.append(order_id)
        cancelled = still
        if cancelled:
            time.sleep(2)
    log("every cancelled or expired order's reservation released or never applied" if not cancelled
        else f"cancelled or expired orders still holding stock at the bound: {len(cancelled)}")
    # Every hold ended: confirmed, cancelled, or past its deadline and expired by the sweep.
    holds = list(loadgen.holds)
    while holds and time.monotonic() < deadline:
        still = []
        for hold_id in holds:
            record = client.request("quiesce_hold", rng.choice(["inventory-0", "inventory-1"]), "GET",
                                    f"/holds/{hold_id}", key=hold_id, admin=True)
            if record["outcome"] == "unknown" or record["error"] == "refused" or \
                    record["outcome"] == "ok" and json.loads(record["body"]).get("state") == "HELD":
                still.append(hold_id)
        holds = still
        if holds:
            time.sleep(1)
    log(f"every hold ended ({len(loadgen.holds)} tried)" if not holds else f"holds still HELD at the bound: {len(holds)}")
    list_orders(client, loadgen.users, "final_list", rng)
    for hold_id in loadgen.holds:
        for _ in range(10):
            record = client.request("final_hold", rng.choice(["inventory-0", "inventory-1"]), "GET", f"/holds/{hold_id}",
                                    key=hold_id, admin=True)
            if record["outcome"] == "ok" or record["status"] == 404:
                break
            time.sleep(0.5)
    for product in PRODUCTS:
        for _ in range(10):
            record = client.request("final_product", "inventory-0", "GET", f"/products/{product}", key=str(product))
            if record["outcome"] == "ok":
                break
            time.sleep(0.5)


def stopped(signum, _frame):
    raise SystemExit(128 + signum)


def main():
    # A run stopped by a signal still stops what it started (background jobs ignore SIGINT).
    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    parser = argparse.ArgumentParser()
    parser.add_argument("--ci", action="store_true", help="the short fixed schedule")
    parser.add_argument("--bin-dir", required=True)
    args = parser.parse_args()
    if args.ci:
        seed, secs, every = CI_SEED, CI_SECS, CI_EVERY
    else:
        seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
        secs = int(os.environ.get("CHAOS_SECS", "600"))
        every = int(os.environ.get("CHAOS_FAULT_EVERY", "20"))
    offset = int(os.environ.get("CHAOS_PORT_OFFSET", "0"))
    workers = int(os.environ.get("CHAOS_WORKERS", "6"))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = os.path.join(ROOT, "target", "chaos", f"{stamp}-seed{seed}")
    os.makedirs(out, exist_ok=True)
    events = open(os.path.join(out, "events.log"), "a", buffering=1)

    def log(message):
        line = f"{time.strftime('%H:%M:%S', time.gmtime())}  {message}"
        print(line, flush=True)
        events.write(line + "\n")

    faults = schedule(seed, secs, every, args.ci)
    with open(os.path.join(out, "schedule.json"), "w") as f:
        json.dump({"seed": seed, "secs": secs, "every": every, "ci": args.ci, "faults": faults}, f, indent=1)
    with open(os.path.join(out, "schedule.txt"), "w") as f:
        f.writelines(f"{fault['at']:>5} s  {check.describe(fault)}\n" for fault in faults)
    log(f"seed {seed}: {secs} s of load, a fault every {every} s{' (CI schedule)' if args.ci else ''}; output {out}")
    for fault in faults:
        log(f"  schedule {fault['at']:>4} s  {check.describe(fault)}")

    history = load.History(os.path.join(out, "history.jsonl"))
    history.note("meta", seed=seed, secs=secs, every=every, ci=args.ci, faults=faults, workers=workers,
                 lock_ttl_ms=LOCK_TTL_MS)
    stack = Stack(out, args.bin_dir, offset)
    started_ok = False
    try:
        log(f"private PostgreSQL :{stack.pg}, Redis :{stack.redis}, RabbitMQ :{stack.amqp} (node {stack.node})")
        stack.start_backing()
        stack.start_proxy()
        for name in ["inventory-0", "inventory-1", "order-0", "order-1"]:
            stack.start_service(name)
        if not stack.wait_ready():
            raise RuntimeError("the services did not become ready")
        client = load.Client(history, stack.ports, ADMIN_TOKEN)
        for product in PRODUCTS:
            stock = HOT_STOCK if product in HOT else STOCK
            record = client.request("setup_product", "inventory-0", "POST", "/products",
                                    {"product_id": product, "name": f"Chaos {product}", "stock": stock},
                                    key=str(product), admin=True)
            if record["status"] != 201:
                raise RuntimeError(f"product {product} not created: {record['status']} {record['body']}")
        started_ok = True
        rss_start = {name: stack.rss_kib(name) for name in INSTANCES}
        history.note("rss", at="start", kib=rss_start)
        log("memory at start (KiB): " + ", ".join(f"{n} {k}" for n, k in rss_start.items()))

        window = PAYMENT_WINDOW_SECS if has_payment_window(stack.ports["order-0"]) else None
        history.note("window", payment_window_secs=window, hold_expiry_interval_ms=HOLD_EXPIRY_INTERVAL_MS)
        log(f"payment window: {window} s" if window else
            "payment window: this order-service has no POST /orders/{id}/confirm; order confirms skipped")
        loadgen = load.Load(client, seed, PRODUCTS, HOT, ["order-0", "order-1"], ["inventory-0", "inventory-1"], workers,
                            payment_window=window)
        begun = time.monotonic()
        threads = loadgen.run()
        log(f"load: {workers} workers")
        failure = []

        def run_faults():
            try:
                for fault in faults:
                    wait = begun + fault["at"] - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    history.note("fault", phase="begin", fault=fault)
                    log(f"fault at {time.monotonic() - begun:.1f} s: {check.describe(fault)}")
                    stack.inject(fault, log)
                    history.note("fault", phase="end", fault=fault)
            except Exception as error:  # noqa: BLE001 - reported, and the run fails
                failure.append(error)
                log(f"fault injection failed: {error!r}")

        injector = threading.Thread(target=run_faults, daemon=True)
        injector.start()
        while time.monotonic() < begun + secs and not failure:
            time.sleep(0.5)
        loadgen.stop.set()
        injector.join(timeout=120)
        for thread in threads:
            thread.join(timeout=60)
        log(f"load stopped after {time.monotonic() - begun:.0f} s: {history.counts['requests']} requests, "
            f"{history.counts['unknown']} unknown")
        stack.undo_all()
        if not stack.wait_ready():
            log("not every instance ready after the faults were undone")
        quiesce(stack, client, loadgen, log, bound=180)
        rss_end = {name: stack.rss_kib(name) for name in INSTANCES}
        history.note("rss", at="end", kib=rss_end,
                     restarts={n: sum(1 for f in faults if f["kind"] == "kill" and f["target"] == n) for n in INSTANCES})
        log("memory at end (KiB): " + ", ".join(f"{n} {k}" for n, k in rss_end.items()))
        if failure:
            raise RuntimeError(f"fault injection failed: {failure[0]!r}")
    except Exception as error:  # noqa: BLE001
        log(f"run failed: {error!r}")
        history.note("error", message=repr(error))
        started_ok = False
    finally:
        stack.stop()
        history.close()
    result = check.check_file(os.path.join(out, "history.jsonl"))
    report = check.report(result)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(report)
    print(report, flush=True)
    log(f"report: {os.path.join(out, 'report.md')}")
    if not started_ok:
        return 2
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
