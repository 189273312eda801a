"""Unit tests of the chaos checker on small made-up histories:

    python3 -m unittest scripts/chaos/test_check.py

A clean history with unknown outcomes passes; each of the others breaks one rule and must be
reported under that rule.
"""

import copy
import json
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

USER = 1000


def request(seq, op, t0, outcome, status, body=None, path="/", req_body=None, key=None, replayed=False, error=None):
    return {"seq": seq, "op": op, "instance": "x", "t0": t0, "t1": t0 + 0.1, "w0": "", "w1": "",
            "req": {"method": "POST", "path": path, "key": key,
                    "body": None if req_body is None else json.dumps(req_body)},
            "outcome": outcome, "status": status, "replayed": replayed, "error": error,
            "body": None if body is None else json.dumps(body)}


def order(order_id, status, amount, quantity=2, product=1):
    return {"order_id": order_id, "user_id": USER, "items": [{"product_id": product, "quantity": quantity}],
            "amount": amount, "status": status, "rejection_reason": None}


def asked(amount, quantity=2, product=1):
    return {"user_id": USER, "items": [{"product_id": product, "quantity": quantity}], "amount": amount}


def product(stock, product_id=1):
    return {"product_id": product_id, "name": "p", "stock": stock, "version": 1}


def deduction(key, quantity=1):
    return {"deduction_id": key, "items": [{"product_id": 1, "quantity": quantity}]}


def clean():
    """Product 1 (stock 10); order o1 (2 units) acknowledged and confirmed; order o2 asked with an
    unknown answer, present and confirmed at the end; order T3 asked with an unknown answer,
    absent at the end; deduction d1 applied, d2 unknown (never resolved); restock r1 (3 units)
    applied. Final stock 8: o2 applied, d2 not (d2 applied would make it 7, also allowed)."""
    o1 = order("o1", "PENDING", "1.00")
    return [
        {"seq": 0, "op": "meta", "t0": 0, "w0": "", "seed": 1, "secs": 10, "every": 5, "faults": []},
        request(1, "setup_product", 0.0, "ok", 201, product(10), "/products", {"product_id": 1}, "1"),
        request(2, "order_create", 1.0, "ok", 202, o1, "/orders", asked("1.00"), "T1"),
        request(3, "order_get", 2.0, "ok", 200, order("o1", "CONFIRMED", "1.00"), "/orders/o1", key="o1"),
        request(4, "order_replay", 3.0, "ok", 202, o1, "/orders", asked("1.00"), "T1", replayed=True),
        request(5, "order_create", 4.0, "unknown", 500, {"type": "/problems/internal"}, "/orders", asked("2.00"), "T2"),
        request(6, "order_create", 4.2, "unknown", None, None, "/orders", asked("3.00"), "T3", error="timeout"),
        request(7, "deduction", 5.0, "ok", 200, {"status": "APPLIED"}, "/deductions", deduction("d1"), "d1"),
        request(8, "deduction", 6.0, "unknown", 503, {"type": "/problems/busy"}, "/deductions", deduction("d2"), "d2"),
        request(9, "restock", 7.0, "ok", 200, product(11), "/products/1/restock", {"quantity": 3}, "r1"),
        request(10, "product_get", 8.0, "ok", 200, product(8), "/products/1", key="1"),
        request(11, "final_list", 10.0, "ok", 200,
                {"items": [order("o2", "CONFIRMED", "2.00"), order("o1", "CONFIRMED", "1.00")], "next": None},
                f"/orders?user_id={USER}&limit=100", key=str(USER)),
        request(12, "final_product", 11.0, "ok", 200, product(8), "/products/1", key="1"),
    ]


def rules(history):
    return {v["rule"] for v in check.check(history)["violations"]}


def by_seq(history, seq):
    return next(r for r in history if r["seq"] == seq)


def list_also(history, listed):
    """Adds an order to the final listing."""
    listing = by_seq(history, 11)
    page = json.loads(listing["body"])
    page["items"].append(listed)
    listing["body"] = json.dumps(page)


BASE = 1_800_000_000.0  # the UTC time, in seconds, of the client's t = 0 in the histories with a clock


def iso(t):
    """The RFC 3339 time of client time t (seconds), as the services write it (nanoseconds)."""
    import datetime
    at = datetime.datetime.fromtimestamp(BASE + t, datetime.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def hold(hold_id, state, quantity, expires=31.0, product_id=2, created=0.0):
    return {"hold_id": hold_id, "state": state,
            "items": [] if quantity is None else [{"product_id": product_id, "quantity": quantity}],
            "expires_at": None if quantity is None else iso(expires),
            "created_at": iso(created), "updated_at": iso(created)}


def try_body(hold_id, quantity, ttl=30, product_id=2):
    return {"hold_id": hold_id, "items": [{"product_id": product_id, "quantity": quantity}], "ttl_secs": ttl}


def window_order(order_id, status, amount, due):
    listed = order(order_id, status, amount, product=3)
    listed["payment_due_at"] = None if due is None else iso(due)
    return listed


def with_holds():
    """clean(), with a clock (every record's w0), and product 2 (stock 20) under holds, product
    3 (stock 10) under orders with a payment window:

    - h1: 3 units, 201, confirmed (200 CONFIRMED), ends CONFIRMED;
    - h2: 2 units, 201, cancelled (200 CANCELLED), ends CANCELLED;
    - h3: 1 unit, 1 s TTL, 201; a confirm after its deadline is refused hold-expired; ends EXPIRED;
    - h4: cancelled before its try (a tombstone), the try refused hold-cancelled; ends a tombstone;
    - h5: its try answered 500 (unknown); 404 at the end: it never held anything;
    - h6: 1 unit, 201 and a replay of it, its confirm unknown; ends CONFIRMED;
    - o5 (2 units of 3): seen AWAITING_PAYMENT, confirmed in time (200), ends CONFIRMED;
    - o6 (2 units of 3): seen AWAITING_PAYMENT, left to expire, a late confirm refused
      payment-window-closed; ends EXPIRED, its units back.

    A read of 2 at 2.2: h1 sold, h2 held: stock 15, held 2. A read of 3 at 3.0: o5 and o6 hold
    their units: stock 6. The final reads: 2 has stock 16 (h1, h6 sold), 3 has stock 8."""
    history = clean()
    o5, o6 = window_order("o5", "PENDING", "5.00", None), window_order("o6", "PENDING", "6.00", None)
    history += [
        request(20, "setup_product", 0.0, "ok", 201, product(20, 2), "/products", {"product_id": 2}, "2"),
        request(21, "setup_product", 0.0, "ok", 201, product(10, 3), "/products", {"product_id": 3}, "3"),
        request(22, "hold_try", 1.0, "ok", 201, hold("h1", "HELD", 3, created=1.0), "/holds", try_body("h1", 3), "h1"),
        request(23, "hold_try", 1.5, "ok", 201, hold("h2", "HELD", 2, created=1.5), "/holds", try_body("h2", 2), "h2"),
        request(24, "hold_confirm", 2.0, "ok", 200, hold("h1", "CONFIRMED", 3, created=1.0), "/holds/h1/confirm", key="h1"),
        request(25, "product_get", 2.2, "ok", 200, dict(product(15, 2), held=2), "/products/2", key="2"),
        request(26, "hold_cancel", 2.5, "ok", 200, hold("h2", "CANCELLED", 2, created=1.5), "/holds/h2/cancel", key="h2"),
        request(27, "hold_try", 3.0, "ok", 201, hold("h3", "HELD", 1, expires=4.05, created=3.05), "/holds",
                try_body("h3", 1, ttl=1), "h3"),
        request(28, "hold_cancel", 3.5, "ok", 200, hold("h4", "CANCELLED", None, created=3.5), "/holds/h4/cancel", key="h4"),
        request(29, "hold_try", 4.0, "fail", 409, {"type": "/problems/hold-cancelled"}, "/holds", try_body("h4", 1), "h4"),
        request(30, "hold_try", 4.5, "unknown", 500, {"type": "/problems/internal"}, "/holds", try_body("h5", 2), "h5"),
        request(31, "hold_confirm", 5.0, "fail", 409, {"type": "/problems/hold-expired"}, "/holds/h3/confirm", key="h3"),
        request(32, "hold_try", 5.5, "ok", 201, hold("h6", "HELD", 1, created=5.5), "/holds", try_body("h6", 1), "h6"),
        request(33, "hold_replay", 6.0, "ok", 201, hold("h6", "HELD", 1, created=5.5), "/holds", try_body("h6", 1), "h6",
                replayed=True),
        request(34, "hold_confirm", 6.5, "unknown", None, None, "/holds/h6/confirm", key="h6", error="timeout"),
        request(40, "order_create", 1.0, "ok", 202, o5, "/orders", asked("5.00", product=3), "T5"),
        request(41, "order_create", 1.05, "ok", 202, o6, "/orders", asked("6.00", product=3), "T6"),
        request(42, "order_get", 1.5, "ok", 200, window_order("o5", "AWAITING_PAYMENT", "5.00", 5.5), "/orders/o5", key="o5"),
        request(43, "order_get", 1.6, "ok", 200, window_order("o6", "AWAITING_PAYMENT", "6.00", 5.6), "/orders/o6", key="o6"),
        request(44, "order_confirm", 2.0, "ok", 200, window_order("o5", "CONFIRMED", "5.00", 5.5), "/orders/o5/confirm",
                key="o5"),
        request(45, "product_get", 3.0, "ok", 200, dict(product(6, 3), held=0), "/products/3", key="3"),
        request(46, "order_confirm", 7.0, "fail", 409, {"type": "/problems/payment-window-closed"}, "/orders/o6/confirm",
                key="o6"),
        request(50, "final_hold", 11.2, "ok", 200, hold("h1", "CONFIRMED", 3, created=1.0), "/holds/h1", key="h1"),
        request(51, "final_hold", 11.3, "ok", 200, hold("h2", "CANCELLED", 2, created=1.5), "/holds/h2", key="h2"),
        request(52, "final_hold", 11.4, "ok", 200, hold("h3", "EXPIRED", 1, expires=4.05, created=3.05), "/holds/h3", key="h3"),
        request(53, "final_hold", 11.5, "ok", 200, hold("h4", "CANCELLED", None, created=3.5), "/holds/h4", key="h4"),
        request(54, "final_hold", 11.6, "fail", 404, {"type": "/problems/not-found"}, "/holds/h5", key="h5"),
        request(55, "final_hold", 11.7, "ok", 200, hold("h6", "CONFIRMED", 1, created=5.5), "/holds/h6", key="h6"),
        request(56, "final_product", 12.0, "ok", 200, dict(product(16, 2), held=0), "/products/2", key="2"),
        request(57, "final_product", 12.1, "ok", 200, dict(product(8, 3), held=0), "/products/3", key="3"),
    ]
    list_also(history, window_order("o5", "CONFIRMED", "5.00", 5.5))
    list_also(history, window_order("o6", "EXPIRED", "6.00", 5.6))
    for r in history:
        if "outcome" in r:
            r["w0"], r["w1"] = iso(r["t0"]), iso(r["t1"])
    return history


def set_body(history, seq, body):
    by_seq(history, seq)["body"] = json.dumps(body)


def listed_as(history, order_id, status, due):
    listing = by_seq(history, 11)
    page = json.loads(listing["body"])
    for i, item in enumerate(page["items"]):
        if item["order_id"] == order_id:
            page["items"][i] = window_order(order_id, status, item["amount"], due)
    listing["body"] = json.dumps(page)


class HoldsAndPaymentWindowTest(unittest.TestCase):
    def test_a_clean_history_with_holds_and_a_payment_window_passes(self):
        result = check.check(with_holds())
        self.assertEqual(result["violations"], [])
        self.assertEqual(result["stats"]["holds tried"], 6)
        self.assertEqual(result["stats"]["products balanced"], 2)  # product 1 has an unknown deduction

    def test_the_same_without_a_clock_passes(self):
        history = with_holds()
        for r in history:
            if "outcome" in r:
                r["w0"] = r["w1"] = ""
        self.assertEqual(rules(history), set())

    def test_a_hold_confirm_whose_final_read_is_missing_gives_a_range(self):
        # h6's confirm is unknown and its final read missing: sold or not, both balance.
        for stock in (16, 17):
            history = [r for r in with_holds() if r["seq"] != 55]
            set_body(history, 56, dict(product(stock, 2), held=0))
            self.assertEqual(rules(history), set(), stock)
        history = [r for r in with_holds() if r["seq"] != 55]
        set_body(history, 56, dict(product(18, 2), held=0))
        self.assertEqual(rules(history), {"bank", "stock-bounds"})  # the final read is a read too

    # (3) a hold is decided once
    def test_a_confirmed_hold_that_ends_cancelled(self):
        history = with_holds()
        set_body(history, 50, hold("h1", "CANCELLED", 3, created=1.0))
        self.assertIn("hold-decided-once", rules(history))

    def test_a_cancelled_hold_that_ends_expired(self):
        history = with_holds()
        set_body(history, 51, hold("h2", "EXPIRED", 2, created=1.5))
        self.assertEqual(rules(history), {"hold-decided-once", "hold-state-backwards"})

    def test_a_hold_refused_hold_expired_that_ends_confirmed(self):
        history = with_holds()
        set_body(history, 52, hold("h3", "CONFIRMED", 1, expires=4.05, created=3.05))
        self.assertIn("hold-decided-once", rules(history))

    def test_a_cancel_refused_hold_confirmed_of_a_hold_that_ends_cancelled(self):
        history = with_holds()
        history.append(request(35, "hold_cancel", 9.0, "fail", 409, {"type": "/problems/hold-confirmed"},
                               "/holds/h2/cancel", key="h2"))
        self.assertEqual(rules(history), {"hold-decided-once"})

    def test_a_cancel_refused_hold_confirmed_of_a_confirmed_hold_is_fine(self):
        history = with_holds()
        history.append(request(35, "hold_cancel", 9.0, "fail", 409, {"type": "/problems/hold-confirmed"},
                               "/holds/h1/cancel", key="h1"))
        self.assertEqual(rules(history), set())

    def test_a_hold_seen_confirmed_then_held(self):
        history = with_holds()
        history.append(request(38, "quiesce_hold", 10.0, "ok", 200, hold("h1", "HELD", 3, created=1.0), "/holds/h1",
                               key="h1"))
        self.assertEqual(rules(history), {"hold-state-backwards"})

    def test_a_hold_seen_held_then_ended_is_fine(self):
        history = with_holds()
        history.append(request(38, "quiesce_hold", 1.2, "ok", 200, hold("h1", "HELD", 3, created=1.0), "/holds/h1",
                               key="h1"))
        history.append(request(39, "quiesce_hold", 10.0, "ok", 200, hold("h1", "CONFIRMED", 3, created=1.0),
                               "/holds/h1", key="h1"))
        self.assertEqual(rules(history), set())

    def test_a_hold_answered_201_that_is_gone_at_the_end(self):
        history = with_holds()
        by_seq(history, 50).update(outcome="fail", status=404, body=json.dumps({"type": "/problems/not-found"}))
        self.assertIn("hold-lost", rules(history))

    def test_a_try_answered_201_after_a_tombstone(self):
        history = with_holds()
        by_seq(history, 29).update(outcome="ok", status=201, body=json.dumps(hold("h4", "HELD", 1, created=4.0)))
        self.assertIn("hold-after-tombstone", rules(history))

    def test_a_try_replay_with_another_body(self):
        history = with_holds()
        set_body(history, 33, hold("h6", "HELD", 1, created=6.0))
        self.assertEqual(rules(history), {"replay-differs"})

    def test_a_refused_try_replayed_with_another_refusal(self):
        history = with_holds()
        history.append(request(35, "hold_replay", 6.0, "fail", 409, {"type": "/problems/insufficient-stock"},
                               "/holds", try_body("h4", 1), "h4"))
        self.assertEqual(rules(history), {"replay-differs"})

    def test_a_hold_still_held_long_after_its_deadline(self):
        history = with_holds()
        history += [
            request(36, "hold_try", 1.0, "ok", 201, hold("h7", "HELD", 1, expires=2.1, created=1.1), "/holds",
                    try_body("h7", 1, ttl=1), "h7"),
            request(37, "final_hold", 11.8, "ok", 200, hold("h7", "HELD", 1, expires=2.1, created=1.1), "/holds/h7",
                    key="h7"),
        ]
        for r in history[-2:]:
            r["w0"], r["w1"] = iso(r["t0"]), iso(r["t1"])
        self.assertEqual(rules(history), {"hold-not-ended"})

    def test_a_hold_refused_hold_expired_before_its_deadline(self):
        history = with_holds()
        set_body(history, 27, hold("h3", "HELD", 1, expires=20.0, created=3.05))
        set_body(history, 52, hold("h3", "EXPIRED", 1, expires=20.0, created=3.05))
        self.assertEqual(rules(history), {"hold-deadline"})

    def test_a_hold_confirmed_after_its_deadline(self):
        history = with_holds()
        set_body(history, 22, hold("h1", "HELD", 3, expires=0.5, created=0.0))
        self.assertEqual(rules(history), {"hold-deadline"})

    # (2) live reads: stock + held, and held
    def test_a_read_that_ignores_a_confirmed_hold(self):
        history = with_holds()
        set_body(history, 25, dict(product(17, 2), held=2))  # 19: h1's 3 units still there
        self.assertEqual(rules(history), {"stock-bounds"})

    def test_held_above_the_holds_possibly_held(self):
        history = with_holds()
        set_body(history, 25, dict(product(14, 2), held=3))  # the sum is right, held is not
        self.assertEqual(rules(history), {"held-bounds"})

    def test_held_below_the_holds_surely_held(self):
        history = with_holds()
        set_body(history, 25, dict(product(17, 2), held=0))  # h2's units not in held
        self.assertEqual(rules(history), {"held-bounds"})

    def test_negative_held(self):
        history = with_holds()
        set_body(history, 25, dict(product(18, 2), held=-1))
        self.assertEqual(rules(history), {"negative-stock"})

    def test_an_awaiting_order_gives_back_before_its_window_closes(self):
        history = with_holds()
        set_body(history, 45, dict(product(8, 3), held=0))  # o6's units back at 3.0, its window open until 5.6
        self.assertEqual(rules(history), {"stock-bounds"})

    def test_an_awaiting_order_may_give_back_once_its_window_may_have_closed(self):
        history = with_holds()
        set_body(history, 43, window_order("o6", "AWAITING_PAYMENT", "6.00", 3.5))
        listed_as(history, "o6", "EXPIRED", 3.5)
        set_body(history, 45, dict(product(8, 3), held=0))
        self.assertEqual(rules(history), set())

    # (1) the bank at quiescence
    def test_a_bank_that_forgets_a_confirmed_hold(self):
        history = with_holds()
        set_body(history, 56, dict(product(19, 2), held=0))
        self.assertEqual(rules(history), {"bank", "stock-bounds"})

    def test_a_bank_that_keeps_an_expired_orders_units(self):
        history = with_holds()
        set_body(history, 57, dict(product(6, 3), held=0))
        self.assertEqual(rules(history), {"bank"})

    def test_held_left_once_every_hold_ended(self):
        history = with_holds()
        set_body(history, 56, dict(product(15, 2), held=1))  # the bank balances, held does not
        self.assertEqual(rules(history), {"held-at-end"})

    # (4) orders with a payment window
    def test_a_confirmed_order_that_ends_expired(self):
        history = with_holds()
        listed_as(history, "o5", "EXPIRED", 5.5)
        set_body(history, 57, dict(product(10, 3), held=0))
        self.assertIn("confirmed-order-given-back", rules(history))

    def test_a_confirmed_order_cancelled_without_a_cancel_after_the_confirm(self):
        history = with_holds()
        listed_as(history, "o5", "CANCELLED", 5.5)
        set_body(history, 57, dict(product(10, 3), held=0))
        # Its units back with no cancel sent: the final read is above the bounds too.
        self.assertEqual(rules(history), {"confirmed-order-given-back", "stock-bounds"})

    def test_a_confirmed_order_cancelled_by_a_later_cancel_is_fine(self):
        history = with_holds()
        listed_as(history, "o5", "CANCELLED", 5.5)
        set_body(history, 57, dict(product(10, 3), held=0))
        history.append(request(47, "order_cancel", 8.0, "ok", 200, window_order("o5", "CANCELLED", "5.00", 5.5),
                               "/orders/o5/cancel", key="o5"))
        self.assertEqual(rules(history), set())

    def test_window_closed_after_a_confirm(self):
        history = with_holds()
        history.append(request(47, "order_confirm", 8.0, "fail", 409, {"type": "/problems/payment-window-closed"},
                               "/orders/o5/confirm", key="o5"))
        self.assertEqual(rules(history), {"window-closed-after-confirm"})

    def test_an_order_confirmed_after_its_window(self):
        history = with_holds()
        for seq in (42, 44):
            set_body(history, seq, window_order("o5", json.loads(by_seq(history, seq)["body"])["status"], "5.00", 0.5))
        listed_as(history, "o5", "CONFIRMED", 0.5)
        self.assertEqual(rules(history), {"payment-deadline"})

    def test_an_order_refused_payment_window_closed_before_its_window_closed(self):
        history = with_holds()
        by_seq(history, 46).update(t0=3.0, t1=3.1)
        self.assertEqual(rules(history), {"payment-deadline"})


class CheckerTest(unittest.TestCase):
    def test_a_clean_history_with_unknowns_passes(self):
        result = check.check(clean())
        self.assertEqual(result["violations"], [])
        self.assertEqual(result["stats"]["unknown"], 3)
        self.assertIn("# Chaos run, seed 1", check.report(result))

    def test_the_other_outcome_of_an_unknown_deduction_passes_too(self):
        history = clean()
        for seq in (10, 12):
            by_seq(history, seq)["body"] = json.dumps(product(7))
        self.assertEqual(rules(history), set())

    def test_a_lost_acknowledged_order(self):
        history = clean()
        listing = by_seq(history, 11)
        listing["body"] = json.dumps({"items": [order("o2", "CONFIRMED", "2.00")], "next": None})
        self.assertIn("acked-order-missing", rules(history))

    def test_an_order_nobody_asked_for(self):
        history = clean()
        list_also(history, order("o9", "REJECTED", "99.00"))
        self.assertEqual(rules(history), {"unasked-order"})

    def test_an_order_whose_every_request_was_refused(self):
        history = clean()
        history.append(request(13, "order_create", 4.5, "fail", 400, {"type": "/problems/unknown-idempotency-key"},
                               "/orders", asked("4.00"), "T4"))
        list_also(history, order("o4", "REJECTED", "4.00"))
        self.assertEqual(rules(history), {"refused-order-exists"})

    def test_a_status_moving_backwards(self):
        history = clean()
        history.append(request(13, "order_get", 2.5, "ok", 200, order("o1", "PENDING", "1.00"), "/orders/o1", key="o1"))
        self.assertEqual(rules(history), {"status-backwards"})

    def test_overlapping_reads_may_come_in_any_order(self):
        history = clean()
        # Sent before the CONFIRMED read ended: the two reads overlap, so no order between them is known.
        history.append(request(13, "order_get", 2.05, "ok", 200, order("o1", "PENDING", "1.00"), "/orders/o1", key="o1"))
        self.assertEqual(rules(history), set())

    def test_a_rejected_order_later_cancelled(self):
        history = clean()
        history.append(request(13, "order_cancel", 8.5, "fail", 409, {"type": "/problems/order-not-cancellable"},
                               "/orders/o1/cancel", key="o1"))
        self.assertIn("status-backwards", rules(history))

    def test_a_replay_with_another_body(self):
        history = clean()
        by_seq(history, 4)["body"] = json.dumps(order("o1", "CONFIRMED", "1.00"))
        self.assertEqual(rules(history), {"replay-differs"})

    def test_a_deduction_replay_with_another_outcome(self):
        history = clean()
        history.append(request(13, "deduction_replay", 9.0, "fail", 409, {"type": "/problems/insufficient-stock"},
                               "/deductions", deduction("d1"), "d1"))
        self.assertEqual(rules(history), {"replay-differs"})

    def test_negative_stock(self):
        history = clean()
        by_seq(history, 10)["body"] = json.dumps(product(-1))
        self.assertEqual(rules(history), {"negative-stock"})

    def test_a_read_above_what_the_operations_allow(self):
        history = clean()
        by_seq(history, 10)["body"] = json.dumps(product(11))
        self.assertEqual(rules(history), {"stock-bounds"})

    def test_a_read_below_what_the_operations_allow(self):
        history = clean()
        by_seq(history, 10)["body"] = json.dumps(product(6))
        self.assertEqual(rules(history), {"stock-bounds"})

    def test_a_bank_that_does_not_balance(self):
        history = clean()
        by_seq(history, 12)["body"] = json.dumps(product(9))
        self.assertIn("bank", rules(history))
        text = check.report(check.check(history))
        self.assertIn("### First violation", text)
        self.assertIn('"seq":12', text)  # the offending read, quoted from the history

    def test_an_order_left_pending(self):
        history = clean()
        listing = by_seq(history, 11)
        page = json.loads(listing["body"])
        page["items"][0]["status"] = "PENDING"
        listing["body"] = json.dumps(page)
        # o2 pending: it holds nothing for sure, and the bank counts it as not sold.
        self.assertIn("order-not-terminal", rules(history))

    def test_an_incomplete_final_listing(self):
        history = clean()
        listing = by_seq(history, 11)
        listing["body"] = json.dumps({"items": [order("o1", "CONFIRMED", "1.00")], "next": "c2"})
        self.assertIn("final-listing", rules(history))

    def test_the_checker_reads_its_own_file_format(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for record in copy.deepcopy(clean()):
                f.write(json.dumps(record) + "\n")
        try:
            self.assertEqual(check.check_file(f.name)["violations"], [])
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
