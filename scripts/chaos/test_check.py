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
