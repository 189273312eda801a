#!/usr/bin/env python3
"""Checks a chaos run's history (history.jsonl, written by load.py) and nothing else.

    python3 scripts/chaos/check.py target/chaos/<run>/history.jsonl [--report report.md]

Exit status 1 when a rule is broken. The rules, and how unknown requests are treated, are in
docs/chaos.md ("What the checker verifies"); each rule below names its section there.
"""

import argparse
import bisect
import collections
import json
import datetime
import math
import re
import sys
from decimal import Decimal

TERMINAL = {"CONFIRMED", "REJECTED", "CANCELLED", "EXPIRED"}
# Where each status may go (itself included): contract §3.1, with the payment window's
# statuses (§3.1.1).
REACH = {
    "PENDING": {"PENDING", "AWAITING_PAYMENT", "CONFIRMED", "REJECTED", "CANCELLED", "EXPIRED"},
    "AWAITING_PAYMENT": {"AWAITING_PAYMENT", "CONFIRMED", "EXPIRED", "CANCELLED"},
    "CONFIRMED": {"CONFIRMED", "CANCELLED"},
    "REJECTED": {"REJECTED"},
    "CANCELLED": {"CANCELLED"},
    "EXPIRED": {"EXPIRED"},
}
INF = math.inf
# Seconds of slack when the client's clock is compared with a service's deadline
# (`expires_at`, `payment_due_at`): the same machine's clock, read at slightly different times.
CLOCK_MARGIN = 1.0


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def body_json(record):
    try:
        return json.loads(record["body"])
    except (TypeError, ValueError):
        return None


def req_json(record):
    raw = record["req"]["body"]
    return None if raw is None else json.loads(raw)


def problem(record):
    parsed = body_json(record)
    return parsed.get("type", "").rsplit("/", 1)[-1] if isinstance(parsed, dict) else ""


def sent(record):
    """Whether the request may have reached a service (a refused connection did not)."""
    return record.get("error") != "refused"


def definite_refusal(record):
    return record["outcome"] == "fail" and sent(record) and problem(record) not in ("request-in-progress", "rate-limited")


def epoch(stamp):
    """Seconds since the epoch of an RFC 3339 time (any number of fraction digits), or None."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp or "")
    if not m:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    at = datetime.datetime.fromisoformat(m.group(1) + zone)
    return at.timestamp() + (float("0." + m.group(2)) if m.group(2) else 0.0)


def tag(user_id, items, amount):
    return (int(user_id), tuple(sorted((int(i["product_id"]), int(i["quantity"])) for i in items)),
            Decimal(str(amount)))


class Checker:
    def __init__(self, records):
        self.records = records
        self.by_seq = {r["seq"]: r for r in records}
        self.requests = [r for r in records if "outcome" in r]
        self.violations = []
        self.notes = []
        self.stats = collections.Counter()

    def violate(self, rule, message, seqs, context=None):
        """Records a broken rule; `context` (a function giving more seqs for the excerpt) is
        only called for the first violation."""
        self.violations.append({"rule": rule, "message": message, "seqs": list(seqs),
                                "context": list(context()) if context and not self.violations else []})

    # ------------------------------------------------------------------ gathering
    def gather(self):
        self.initial = {}
        for r in self.requests:
            if r["op"] == "setup_product" and r["outcome"] == "ok":
                product = body_json(r)
                self.initial[int(product["product_id"])] = int(product["stock"]) + int(product.get("held") or 0)
        self.tokens = collections.defaultdict(list)  # token -> create/replay records
        self.deductions = collections.defaultdict(list)
        self.restocks = collections.defaultdict(list)
        self.cancels = collections.defaultdict(list)
        self.confirms = collections.defaultdict(list)  # order_id -> POST /orders/{id}/confirm records
        # hold_id -> the records of its tries (and replays), confirms, cancels and final reads
        self.holds = collections.defaultdict(lambda: collections.defaultdict(list))
        hold_ops = {"hold_try": "tries", "hold_replay": "tries", "hold_confirm": "confirms",
                    "hold_cancel": "cancels", "quiesce_hold": "reads", "final_hold": "finals"}
        for r in self.requests:
            if r["op"] in hold_ops:
                self.holds[r["req"]["key"]][hold_ops[r["op"]]].append(r)
            elif r["op"] == "order_confirm":
                self.confirms[r["req"]["key"]].append(r)
        # The client's monotonic clock against UTC, to place the services' deadlines
        # (`payment_due_at`, `expires_at`) on the t0/t1 axis: both clocks are read together.
        offsets = sorted(r["t0"] - epoch(r["w0"]) for r in self.requests if epoch(r.get("w0")) is not None)
        self.mono_offset = offsets[len(offsets) // 2] if offsets else None
        for r in self.requests:
            op, key = r["op"], r["req"].get("key")
            if op in ("order_create", "order_replay"):
                self.tokens[key].append(r)
            elif op in ("deduction", "deduction_replay"):
                self.deductions[key].append(r)
            elif op == "restock":
                self.restocks[key].append(r)
            elif op == "order_cancel":
                self.cancels[key].append(r)
        self.stats["holds tried"] = len(self.holds)
        self.stats["requests"] = len(self.requests)
        self.stats["unknown"] = sum(1 for r in self.requests if r["outcome"] == "unknown")
        self.stats["refused connections"] = sum(1 for r in self.requests if not sent(r))
        self.final_listing()

    def final_listing(self):
        """The last complete listing of each user's orders (`final_list` pages, chained by `next`)."""
        pages = {}
        for r in self.requests:
            if r["op"] == "final_list" and r["outcome"] == "ok":
                pages[r["req"]["path"]] = r
        users = {int(req_json(r)["user_id"]) for rs in self.tokens.values() for r in rs}
        users |= {int(r["req"]["key"]) for r in self.requests if r["op"] == "final_list"}
        self.listed = {}  # order_id -> (order, record)
        self.listing_complete = True
        for user in sorted(users):
            path = f"/orders?user_id={user}&limit=100"
            while True:
                record = pages.get(path)
                if record is None:
                    self.listing_complete = False
                    self.violate("final-listing", f"the final listing of user {user}'s orders is missing the page {path}",
                                 [r["seq"] for r in self.requests if r["op"] == "final_list" and r["req"]["key"] == str(user)][-3:])
                    break
                page = body_json(record)
                for order in page["items"]:
                    self.listed[order["order_id"]] = (order, record)
                if not page.get("next"):
                    break
                from urllib.parse import quote
                path = f"/orders?user_id={user}&limit=100&after={quote(page['next'])}"
        self.stats["orders listed at the end"] = len(self.listed)
        for order, _ in self.listed.values():
            self.stats[f"orders {order['status']} at the end"] += 1

    # ------------------------------------------------------------------ orders
    def check_orders(self):
        by_tag = collections.defaultdict(list)
        self.order_of_token = {}
        for token, rs in self.tokens.items():
            asked = req_json(rs[0])
            by_tag[tag(asked["user_id"], asked["items"], asked["amount"])].append(token)
            oks = [r for r in rs if r["outcome"] == "ok"]
            if oks:
                self.stats["orders acknowledged"] += 1
                order_id = body_json(oks[0])["order_id"]
                self.order_of_token[token] = order_id
                if self.listing_complete and order_id not in self.listed:
                    self.violate("acked-order-missing",
                                 f"order {order_id} was acknowledged ({oks[0]['status']}) but is not in the final listing",
                                 [oks[0]["seq"]])
            elif any(r["outcome"] == "unknown" for r in rs):
                self.stats["orders asked with only unknown answers"] += 1
        if not self.listing_complete:
            return
        self.token_of_order = {}
        for order_id, (order, record) in self.listed.items():
            tokens = by_tag.get(tag(order["user_id"], order["items"], order["amount"]), [])
            if not tokens:
                self.violate("unasked-order", f"order {order_id} ({order['user_id']}, {order['amount']}) is in the "
                             "final listing but no client asked for it", [record["seq"]])
                continue
            token = tokens[0]
            self.token_of_order[order_id] = token
            attempts = self.tokens[token]
            if all(r["outcome"] == "fail" for r in attempts) and all(definite_refusal(r) or not sent(r) for r in attempts):
                self.violate("refused-order-exists", f"order {order_id} exists, but every request for its token was refused",
                             [record["seq"]] + [r["seq"] for r in attempts])
            known = self.order_of_token.get(token)
            if known is not None and known != order_id:
                self.violate("one-token-one-order", f"token {token} has two orders: {known} (acknowledged) and {order_id}",
                             [record["seq"]] + [r["seq"] for r in attempts if r["outcome"] == "ok"][:1])
            self.order_of_token.setdefault(token, order_id)

    def check_replays(self):
        """Every 2xx answer for one key is byte for byte the first. A deduction's or restock's
        first outcome is replayed even when it was a refusal (same status and problem type);
        an order token's refusals are not compared (a 4xx does not use a token up)."""
        groups = [(k, rs, False) for k, rs in self.tokens.items()]
        groups += [(k, rs, True) for k, rs in list(self.deductions.items()) + list(self.restocks.items())]
        groups += [(k, h["tries"], True) for k, h in self.holds.items()]
        for key, rs, refusals_replay in groups:
            answers = [r for r in sorted(rs, key=lambda r: r["t1"])
                       if r["outcome"] == "ok" or refusals_replay and definite_refusal(r)]
            for r in answers[1:]:
                first = answers[0]
                self.stats["replays compared"] += 1
                if r["outcome"] == "ok" and first["outcome"] == "ok":
                    same = r["status"] == first["status"] and r["body"] == first["body"]
                else:
                    same = r["status"] == first["status"] and problem(r) == problem(first)
                if not same:
                    self.violate("replay-differs", f"{r['op']} of {key} answered {r['status']} {r['body']!r}, "
                                 f"but its first answer was {first['status']} {first['body']!r}", [first["seq"], r["seq"]])

    def observations(self):
        obs = collections.defaultdict(list)  # order_id -> [(t0, t1, status, seq)]
        acked_at = {}
        for token, rs in self.tokens.items():
            for r in rs:
                if r["outcome"] == "ok":
                    order = body_json(r)
                    acked_at[order["order_id"]] = min(acked_at.get(order["order_id"], INF), r["t1"])
                    if not r["replayed"]:
                        obs[order["order_id"]].append((r["t0"], r["t1"], order["status"], r["seq"]))
        for r in self.requests:
            if r["op"] == "order_get" and r["outcome"] == "ok":
                order = body_json(r)
                obs[order["order_id"]].append((r["t0"], r["t1"], order["status"], r["seq"]))
            elif r["op"] == "order_get" and r["status"] == 404:
                order_id = r["req"]["key"]
                if acked_at.get(order_id, INF) < r["t0"]:
                    self.violate("acked-order-404", f"order {order_id} was acknowledged, then answered 404", [r["seq"]])
            elif r["op"] == "order_cancel" and r["outcome"] == "ok":
                order = body_json(r)
                obs[order["order_id"]].append((r["t0"], r["t1"], order["status"], r["seq"]))
            elif r["op"] == "order_confirm" and r["outcome"] == "ok":
                order = body_json(r)
                obs[order["order_id"]].append((r["t0"], r["t1"], order["status"], r["seq"]))
            elif r["op"] == "order_cancel" and r["status"] == 409 and problem(r) == "order-not-cancellable":
                obs[r["req"]["key"]].append((r["t0"], r["t1"], "REJECTED", r["seq"]))
            elif r["op"] in ("quiesce_list", "final_list") and r["outcome"] == "ok":
                for order in body_json(r)["items"]:
                    obs[order["order_id"]].append((r["t0"], r["t1"], order["status"], r["seq"]))
        return obs

    def check_status_machine(self):
        self.obs = self.observations()
        for order_id, seen in self.obs.items():
            seen.sort()
            done = False
            for later in seen:
                for earlier in seen:
                    if earlier[1] < later[0] and later[2] not in REACH.get(earlier[2], set()):
                        self.violate("status-backwards", f"order {order_id} was seen {earlier[2]} and later {later[2]}",
                                     [earlier[3], later[3]])
                        done = True
                        break
                if done:
                    break
        for order_id, (order, record) in self.listed.items():
            if order["status"] not in TERMINAL:
                self.violate("order-not-terminal", f"order {order_id} is still {order['status']} at quiescence",
                             [record["seq"]])

    # ------------------------------------------------------------------ stock
    @staticmethod
    def outcome_times(rs):
        """(a, d, refused): the earliest time a request of the operation may have reached a
        service; the earliest end of a 2xx answer (inf if none); whether it was refused."""
        a = min((r["t0"] for r in rs if sent(r)), default=INF)
        d = min((r["t1"] for r in rs if r["outcome"] == "ok"), default=INF)
        refused = d == INF and any(definite_refusal(r) for r in rs)
        return a, d, refused

    def stock_ops(self):
        """Per product: restocks and deductions as (a, d, quantity); orders as dicts."""
        restocks, deductions = collections.defaultdict(list), collections.defaultdict(list)
        for rs in self.restocks.values():
            a, d, refused = self.outcome_times(rs)
            if not refused and a < INF:
                product = int(rs[0]["req"]["path"].split("/")[2])
                restocks[product].append((a, d, req_json(rs[0])["quantity"]))
        for rs in self.deductions.values():
            a, d, refused = self.outcome_times(rs)
            self.stats["deductions " + ("applied" if d < INF else "refused" if refused else "unknown")] += 1
            if not refused and a < INF:
                for item in req_json(rs[0])["items"]:
                    deductions[int(item["product_id"])].append((a, d, int(item["quantity"])))
        orders = collections.defaultdict(list)
        for order_id, (order, _) in self.listed.items():
            token = self.token_of_order.get(order_id)
            if token is None:
                continue
            a = min((r["t0"] for r in self.tokens[token] if sent(r)), default=INF)
            confirmed = min((o[1] for o in self.obs.get(order_id, []) if o[2] == "CONFIRMED"), default=INF)
            awaiting = min((o[1] for o in self.obs.get(order_id, []) if o[2] == "AWAITING_PAYMENT"), default=INF)
            cancel = min((r["t0"] for r in self.cancels.get(order_id, []) if sent(r)), default=INF)
            due = self.mono(order.get("payment_due_at"))
            for item in order["items"]:
                orders[int(item["product_id"])].append(
                    {"a": a, "confirmed": confirmed, "awaiting": awaiting, "due": due, "cancel": cancel,
                     "q": int(item["quantity"]), "final": order["status"], "id": order_id})
        return restocks, deductions, orders

    def mono(self, stamp):
        """A service's RFC 3339 time on the client's monotonic clock (None when there is none,
        or the history has no clock)."""
        at = epoch(stamp) if isinstance(stamp, str) else None
        return None if at is None or self.mono_offset is None else at + self.mono_offset

    # ------------------------------------------------------------------ holds
    def hold_facts(self):
        """Per hold tried, what the history says of it (times on the client's clock)."""
        self.hold_info = {}
        for hold_id, h in self.holds.items():
            if not h["tries"]:
                continue
            asked = req_json(h["tries"][0])
            a, d, refused = self.outcome_times(h["tries"])
            created = next((r for r in sorted(h["tries"], key=lambda r: r["t1"]) if r["status"] == 201), None)
            final, final_record = None, None  # the last final read's hold, {"state": "ABSENT"} for a 404
            for r in h["finals"]:
                if r["outcome"] == "ok":
                    final, final_record = body_json(r), r
                elif r["status"] == 404:
                    final, final_record = {"state": "ABSENT", "items": []}, r
            ok_confirms = [r for r in h["confirms"] if r["outcome"] == "ok"]
            ok_cancels = [r for r in h["cancels"] if r["outcome"] == "ok"]
            info = {
                "items": [(int(i["product_id"]), int(i["quantity"])) for i in asked["items"]],
                "a": a, "created": created, "refused": refused, "final": final, "final_record": final_record,
                "expires": self.mono(body_json(created).get("expires_at")) if created else None,
                # answered CONFIRMED: its units left held for good before the answer
                "confirmed": min((r["t1"] for r in ok_confirms if body_json(r).get("state") == "CONFIRMED"), default=INF),
                "confirm_sent": min((r["t0"] for r in h["confirms"] if sent(r)), default=INF),
                # answered CANCELLED with its items: its units were back in stock before the answer
                "cancelled": min((r["t1"] for r in ok_cancels if body_json(r).get("state") == "CANCELLED"
                                  and body_json(r).get("items")), default=INF),
                "end_sent": min((r["t0"] for r in h["confirms"] + h["cancels"] if sent(r)), default=INF),
            }
            # Held nothing ever: its try was refused, or the end shows no hold or a tombstone.
            info["nothing"] = refused or (final is not None and (final["state"] == "ABSENT" or not final.get("items")))
            self.hold_info[hold_id] = info
            self.stats["hold tries " + ("answered 201" if created else "refused" if refused else "unknown")] += 1
            if final is not None:
                self.stats[f"holds {final['state']} at the end"] += 1
            else:
                self.stats["holds without a final read"] += 1

    def check_holds(self):
        """A hold is decided once, and what its answers said is what it ends as."""
        self.hold_facts()
        margin = CLOCK_MARGIN
        for hold_id, info in self.hold_info.items():
            h, final, final_record = self.holds[hold_id], info["final"], info["final_record"]

            def wrong(rule, message, records):
                self.violate(rule, f"hold {hold_id}: {message}", [r["seq"] for r in records if r is not None])

            if final is not None:
                state = final["state"]
                for r in h["confirms"] + h["cancels"]:
                    if r["t1"] > final_record["t0"]:
                        continue  # answered after the final read was sent: not compared
                    said = body_json(r) if r["outcome"] == "ok" else {}
                    if r["outcome"] == "ok" and r["op"] == "hold_confirm" and state != "CONFIRMED":
                        wrong("hold-decided-once", f"a confirm answered {said.get('state')}, but it ends {state}", [r, final_record])
                    elif r["outcome"] == "ok" and r["op"] == "hold_cancel" and said.get("items") and state != said.get("state"):
                        wrong("hold-decided-once", f"a cancel answered {said.get('state')}, but it ends {state}", [r, final_record])
                    elif r["outcome"] == "ok" and r["op"] == "hold_cancel" and not said.get("items") and \
                            not (state == "ABSENT" or state == "CANCELLED" and not final.get("items")):
                        wrong("hold-decided-once", f"a cancel answered that nothing was held, but it ends {state} "
                              f"with {final.get('items')}", [r, final_record])
                    elif r["status"] == 409 and problem(r) == "hold-expired" and state != "EXPIRED":
                        wrong("hold-decided-once", f"a confirm was refused hold-expired, but it ends {state}", [r, final_record])
                    elif r["status"] == 409 and problem(r) == "hold-confirmed" and state != "CONFIRMED":
                        wrong("hold-decided-once", f"a cancel was refused hold-confirmed, but it ends {state}", [r, final_record])
                    elif r["status"] == 409 and problem(r) == "hold-cancelled" and state != "CANCELLED":
                        wrong("hold-decided-once", f"a confirm was refused hold-cancelled, but it ends {state}", [r, final_record])
                if info["created"] is not None and (state == "ABSENT" or not final.get("items")):
                    wrong("hold-lost", f"its try was answered 201, but at the end it is {state} with {final.get('items')}",
                          [info["created"], final_record])
                if state == "HELD" and info["expires"] is not None and info["expires"] + 5.0 < final_record["t0"]:
                    wrong("hold-not-ended", "still HELD at quiescence, more than 5 s past its expires_at", [final_record])
            # Once seen ended, a hold stays as it was seen: confirm and cancel answers that name
            # an end (not a cancel's EXPIRED, which the sweep may still have to carry out), and
            # every read of it (`quiesce_hold`, `final_hold`); try answers are left out, since
            # a replay of a try is by definition its first answer.
            seen = sorted([(r["t0"], r["t1"], body_json(r)["state"], r) for r in h["confirms"] + h["cancels"]
                           if r["outcome"] == "ok" and body_json(r).get("items")
                           and body_json(r)["state"] in ("CONFIRMED", "CANCELLED")] +
                          [(r["t0"], r["t1"], body_json(r)["state"], r) for r in h["reads"] + h["finals"]
                           if r["outcome"] == "ok"], key=lambda o: o[0])
            ended = [o for o in seen if o[2] != "HELD"]
            for later in seen:
                earlier = next((o for o in ended if o[1] < later[0] and o[2] != later[2]), None)
                if earlier is not None:
                    wrong("hold-state-backwards", f"seen {earlier[2]}, then {later[2]}", [earlier[3], later[3]])
                    break
            # A try after a cancel that said nothing was held (a tombstone, or a refused try)
            # holds nothing.
            nothing_at = min((r["t1"] for r in h["cancels"] if r["outcome"] == "ok" and not body_json(r).get("items")),
                             default=INF)
            for r in h["tries"]:
                if r["status"] == 201 and r["t0"] > nothing_at:
                    cancel = next(c for c in h["cancels"] if c["t1"] == nothing_at)
                    wrong("hold-after-tombstone", "a try sent after a cancel had left a tombstone was answered 201", [cancel, r])
                    break
            # The clock decides: no confirm after the deadline, no hold-expired well before it.
            if info["expires"] is None:
                continue
            if info["confirmed"] < INF and info["confirm_sent"] > info["expires"] + margin:
                wrong("hold-deadline", "confirmed by a confirm first sent after its expires_at",
                      [r for r in h["confirms"] if r["outcome"] == "ok"][:1])
            for r in h["confirms"]:
                if r["status"] == 409 and problem(r) == "hold-expired" and r["t1"] < info["expires"] - margin:
                    wrong("hold-deadline", "refused hold-expired before its expires_at", [info["created"], r])
                    break

    # ------------------------------------------------------------------ payment window
    def check_order_confirms(self):
        """A confirmed order is never given back by the window; the clock decides the window."""
        due_of = {}
        for order_id, (order, _) in self.listed.items():
            due_of[order_id] = self.mono(order.get("payment_due_at"))
        for order_id, rs in self.confirms.items():
            oks = [r for r in rs if r["outcome"] == "ok"]
            refusal = next((problem(r) for r in rs if definite_refusal(r)), None)
            self.stats["order confirms " + ("answered 200" if oks else f"refused {refusal}" if refusal else "unknown")] += 1
            if not oks:
                continue
            first_ok = min(oks, key=lambda r: r["t1"])
            for r in rs:
                if r["status"] == 409 and problem(r) == "payment-window-closed" and r["t0"] > first_ok["t1"]:
                    self.violate("window-closed-after-confirm", f"order {order_id} was confirmed (200), then a confirm "
                                 "was refused payment-window-closed", [first_ok["seq"], r["seq"]])
                    break
            if order_id in self.listed:
                order, record = self.listed[order_id]
                status = order["status"]
                later_cancel = any(sent(c) and c["t1"] > first_ok["t0"] for c in self.cancels.get(order_id, []))
                if status != "CONFIRMED" and not (status == "CANCELLED" and later_cancel):
                    self.violate("confirmed-order-given-back", f"order {order_id} was confirmed (200), but it ends {status}"
                                 f"{'' if status != 'CANCELLED' else ' with no cancel sent after the confirm'}",
                                 [first_ok["seq"], record["seq"]])
            due = due_of.get(order_id)
            if due is not None and min(r["t0"] for r in rs if sent(r)) > due + CLOCK_MARGIN:
                self.violate("payment-deadline", f"order {order_id} confirmed (200) by a confirm first sent after "
                             "its payment_due_at", [first_ok["seq"]])
        for order_id, rs in self.confirms.items():
            due = due_of.get(order_id)
            for r in rs:
                if r["status"] == 409 and problem(r) == "payment-window-closed" and due is not None \
                        and r["t1"] < due - CLOCK_MARGIN:
                    self.violate("payment-deadline", f"order {order_id} refused payment-window-closed before its "
                                 "payment_due_at", [r["seq"]])
                    break

    def check_stock(self):
        if not self.listing_complete:
            self.notes.append("stock bounds and the bank not checked: the final listing is incomplete")
            return
        restocks, deductions, orders = self.stock_ops()
        reads = collections.defaultdict(list)
        for r in self.requests:
            if r["op"] in ("product_get", "final_product") and r["outcome"] == "ok":
                product = body_json(r)
                reads[int(product["product_id"])].append((r, product))
        for product_id, product_reads in reads.items():
            initial = self.initial.get(product_id)
            if initial is None:
                continue
            rs, ds, os_ = restocks[product_id], deductions[product_id], orders[product_id]
            r_a, r_d, d_a, d_d = (Prefix([(op[i], op[2]) for op in ops]) for ops, i in
                                  ((rs, 0), (rs, 1), (ds, 0), (ds, 1)))
            holders = [o for o in os_ if o["final"] != "REJECTED"]
            possible = Prefix([(o["a"], o["q"]) for o in holders])
            # Orders seen CONFIRMED or AWAITING_PAYMENT: they hold their units from that answer
            # until a cancel is sent or (not yet seen CONFIRMED) their payment_due_at comes.
            definite = [o for o in os_ if min(o["confirmed"], o["awaiting"]) < INF]
            holds = [(info, q) for info in self.hold_info.values() for p, q in info["items"] if p == product_id]
            # A hold changes stock + held only when confirmed: the try moves units from stock
            # to held, a cancel or the expiry moves them back.
            sold_sure = Prefix([(info["confirmed"], q) for info, q in holds])
            sold_maybe = Prefix([(info["confirm_sent"], q) for info, q in holds
                                 if info["final"] is None or info["final"]["state"] == "CONFIRMED"])
            for record, product in product_reads:
                self.stats["stock reads checked"] += 1
                s, e = record["t0"], record["t1"]
                stock, held = int(product["stock"]), int(product.get("held") or 0)
                if stock < 0 or held < 0:
                    self.violate("negative-stock", f"product {product_id} read with stock {stock}, held {held}",
                                 [record["seq"]])
                    continue
                held_max = sum(q for info, q in holds if info["a"] < e and not info["nothing"]
                               and min(info["confirmed"], info["cancelled"]) >= s)
                held_min = sum(q for info, q in holds if info["created"] is not None and info["created"]["t1"] < s
                               and info["end_sent"] > e and info["expires"] is not None
                               and info["expires"] - CLOCK_MARGIN > e)
                if not held_min <= held <= held_max:
                    self.violate("held-bounds", f"product {product_id} read held {held}, outside [{held_min}, {held_max}] "
                                 f"(units of holds surely HELD at the read, possibly HELD)", [record["seq"]],
                                 lambda p=product_id, r=record: self.product_context(p, r))
                held_now = sum(o["q"] for o in definite if o["cancel"] > e and
                               (o["confirmed"] < s or o["awaiting"] < s and o["due"] is not None
                                and o["due"] - CLOCK_MARGIN > e))
                upper = initial + r_a.before(e) - d_d.before(s) - held_now - sold_sure.before(s)
                lower = initial + r_d.before(s) - d_a.before(e) - possible.before(e) - sold_maybe.before(e)
                if not lower <= stock + held <= upper:
                    context = lambda p=product_id, r=record: self.product_context(p, r)  # noqa: E731
                    self.violate("stock-bounds",
                                 f"product {product_id} read stock {stock} + held {held} = {stock + held}, outside "
                                 f"[{lower}, {upper}] (initial {initial}; restocks acknowledged before the read "
                                 f"{r_d.before(s)}, possibly applied {r_a.before(e)}; deductions acknowledged "
                                 f"{d_d.before(s)}, possibly applied {d_a.before(e)}; orders surely holding "
                                 f"{held_now}, possibly holding {possible.before(e)}; holds surely confirmed "
                                 f"{sold_sure.before(s)}, possibly confirmed {sold_maybe.before(e)})",
                                 [record["seq"]], context)
        self.check_bank(restocks, deductions, orders, reads)

    def check_bank(self, restocks, deductions, orders, reads):
        """At quiescence: initial + restocks = stock + held + sold, exactly once every operation is known."""
        for product_id, initial in sorted(self.initial.items()):
            finals = [(r, p) for r, p in reads.get(product_id, []) if r["op"] == "final_product"]
            if not finals:
                self.violate("final-product", f"product {product_id} has no final read", [])
                continue
            record, product = finals[-1]
            value = int(product["stock"]) + int(product.get("held") or 0)
            restocked = sum(q for _, d, q in restocks[product_id] if d < INF)
            restock_unknown = sum(q for _, d, q in restocks[product_id] if d == INF)
            deducted = sum(q for _, d, q in deductions[product_id] if d < INF)
            deduct_unknown = sum(q for _, d, q in deductions[product_id] if d == INF)
            confirmed = sum(o["q"] for o in orders[product_id] if o["final"] == "CONFIRMED")
            # An order still waiting for its payment at the final listing may have expired since.
            awaiting = sum(o["q"] for o in orders[product_id] if o["final"] == "AWAITING_PAYMENT")
            holds = [(info, q) for info in self.hold_info.values() for p, q in info["items"] if p == product_id]
            sold, sold_unknown = 0, 0
            for info, q in holds:
                final = info["final"]
                if final is not None and final["state"] == "CONFIRMED" or final is None and info["confirmed"] < INF:
                    sold += q
                elif final is None and info["confirm_sent"] < INF and not info["nothing"]:
                    sold_unknown += q
            lower = initial + restocked - deducted - deduct_unknown - confirmed - awaiting - sold - sold_unknown
            upper = initial + restocked + restock_unknown - deducted - confirmed - sold
            self.stats["products balanced" if lower == upper == value else "products checked"] += 1
            if not lower <= value <= upper:
                expected = f"{lower}" if lower == upper else f"[{lower}, {upper}]"
                self.violate("bank", f"product {product_id}: initial {initial} + restocks {restocked}"
                             f"{f' (+{restock_unknown} unknown)' if restock_unknown else ''} - direct deductions "
                             f"{deducted}{f' (+{deduct_unknown} unknown)' if deduct_unknown else ''} - confirmed orders "
                             f"{confirmed}{f' (+{awaiting} awaiting payment)' if awaiting else ''} - confirmed holds "
                             f"{sold}{f' (+{sold_unknown} unknown)' if sold_unknown else ''} = {expected}, but the final "
                             f"read has stock + held = {value}",
                             [record["seq"]], lambda: self.product_context(product_id, record))
            # held at the end: only holds still HELD (or not read at the end) may count in it;
            # once every hold has ended, none.
            held = int(product.get("held") or 0)
            may_hold = sum(q for info, q in holds if not info["nothing"] and (
                info["final"] is None or info["final"]["state"] == "HELD" or info["final_record"]["t1"] >= record["t0"]))
            if held > may_hold:
                self.violate("held-at-end", f"product {product_id}: the final read has held {held}, but the holds still "
                             f"HELD at the end hold {may_hold}", [record["seq"]],
                             lambda: self.product_context(product_id, record))

    def product_context(self, product_id, record, n=12):
        """The last requests before `record` that touched the product."""
        touched = []
        for r in self.requests:
            if r["t0"] > record["t1"] or r["seq"] == record["seq"]:
                continue
            body = None
            if r["op"] in ("deduction", "deduction_replay", "order_create", "hold_try", "hold_replay"):
                body = req_json(r)
            elif r["op"] in ("hold_confirm", "hold_cancel") and r["req"]["key"] in self.holds:
                tries = self.holds[r["req"]["key"]]["tries"]
                body = req_json(tries[0]) if tries else None
            if (r["op"] == "restock" and r["req"]["path"].split("/")[2] == str(product_id)) or \
                    (body and any(int(i["product_id"]) == product_id for i in body["items"])):
                touched.append(r["seq"])
        return touched[-n:]

    def run(self):
        self.gather()
        self.check_orders()
        self.check_replays()
        self.check_status_machine()
        self.check_holds()
        self.check_order_confirms()
        self.check_stock()
        return self


class Prefix:
    """Sum of quantities whose time is strictly before t."""

    def __init__(self, pairs):
        pairs = sorted((t, q) for t, q in pairs if t < INF)
        self.times = [t for t, _ in pairs]
        self.sums = [0]
        for _, q in pairs:
            self.sums.append(self.sums[-1] + q)

    def before(self, t):
        return self.sums[bisect.bisect_left(self.times, t)]


def check(records):
    checker = Checker(records).run()
    meta = next((r for r in records if r["op"] == "meta"), {})
    rss = {r["at"]: r for r in records if r["op"] == "rss"}
    window = next((r for r in records if r["op"] == "window"), None)
    if window is not None:
        checker.notes.append(f"payment window {window['payment_window_secs']} s: order confirms sent"
                             if window.get("payment_window_secs") else
                             "payment window: this order-service has no POST /orders/{id}/confirm; order confirms "
                             "skipped, the payment-window rules had nothing to judge")
    return {"meta": meta, "stats": dict(checker.stats), "violations": checker.violations, "notes": checker.notes,
            "faults": [r for r in records if r["op"] == "fault" and r.get("phase") == "begin"],
            "rss": rss, "errors": [r["message"] for r in records if r["op"] == "error"],
            "by_seq": checker.by_seq}


def check_file(path):
    return check(load(path))


def excerpt(record, width=300):
    shown = {k: record.get(k) for k in ("seq", "op", "instance", "w0", "w1", "outcome", "status", "replayed", "error")}
    shown["req"] = record.get("req")
    body = record.get("body")
    shown["body"] = body if body is None or len(body) <= width else body[:width] + "..."
    return json.dumps(shown, separators=(",", ":"))


def describe(fault):
    kind, secs = fault["kind"], fault["secs"]
    if kind == "kill":
        return f"kill -9 {fault['target']}, restarted after {secs} s"
    if kind == "stop":
        return f"SIGSTOP {fault['target']} for {secs} s, then SIGCONT"
    if kind == "cut":
        return f"proxy cut {fault['target']} -> {fault['backing']} for {secs} s"
    if kind == "postgres":
        return f"PostgreSQL stopped ({fault['mode']}), started again after {secs} s"
    if kind == "redis":
        return f"Redis shut down (every key lost), started again after {secs} s"
    return f"RabbitMQ stop_app, start_app after {secs} s"


def report(result):
    meta, stats, violations = result["meta"], result["stats"], result["violations"]
    lines = [f"# Chaos run, seed {meta.get('seed')}", "",
             f"- {meta.get('secs')} s of load, a fault every {meta.get('every')} s"
             f"{' (CI schedule)' if meta.get('ci') else ''}; {meta.get('workers')} workers",
             f"- faults injected: {len(result['faults'])} of {len(meta.get('faults', []))} scheduled",
             f"- requests: {stats.get('requests', 0)}; unknown (5xx, timeout, broken connection): "
             f"{stats.get('unknown', 0)}; refused connections (never sent): {stats.get('refused connections', 0)}",
             f"- violations: {len(violations)}"]
    lines += [f"- {name}: {value}" for name, value in sorted(stats.items())
              if name not in ("requests", "unknown", "refused connections")]
    lines += [f"- run error: {e}" for e in result["errors"]] + [f"- note: {n}" for n in result["notes"]]
    lines += ["", "## Faults", ""] + [f"- {f['fault']['at']:>4} s (at {f['w0']}) {describe(f['fault'])}"
                                       for f in result["faults"]]
    start, end = result["rss"].get("start", {}), result["rss"].get("end", {})
    if start:
        lines += ["", "## Memory (resident set)", "", "| instance | start | end | restarts (kill -9) |",
                  "| --- | --- | --- | --- |"]
        for name, kib in start.get("kib", {}).items():
            end_kib = end.get("kib", {}).get(name)
            lines.append(f"| {name} | {kib / 1024:.1f} MiB | "
                         f"{'-' if end_kib is None else f'{end_kib / 1024:.1f} MiB'} | {end.get('restarts', {}).get(name, '-')} |")
    if violations:
        counts = collections.Counter(v["rule"] for v in violations)
        lines += ["", "## Violations", ""] + [f"- {rule}: {n}" for rule, n in counts.most_common()]
        first = violations[0]
        lines += ["", "### First violation", "", f"**{first['rule']}**: {first['message']}", "", "```"]
        lines += [excerpt(result["by_seq"][s]) for s in first["seqs"] if s in result["by_seq"]]
        if first["context"]:
            lines.append("-- the requests before it that touched the same product:")
            lines += [excerpt(result["by_seq"][s]) for s in first["context"] if s in result["by_seq"]]
        lines += ["```"]
        lines += ["", "### All violations (the first 30)", ""] + [f"- {v['rule']}: {v['message']}" for v in violations[:30]]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("history")
    parser.add_argument("--report")
    args = parser.parse_args()
    result = check_file(args.history)
    text = report(result)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    print(text)
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
