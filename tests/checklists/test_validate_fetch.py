"""The validator checks a fact's ``fetch:`` (issue 33): the reads the guard may make itself."""

from __future__ import annotations

import textwrap

import pytest

from policyguard.authoring.validate import ToolInfo, validate_checklist
from policyguard.checklist.schema import parse_checklist

BASE = """
policy: {name: shop, version: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
facts:
  order:
    tool: get_order
    match: {order_id: args.order_id}
  products:
    tool: get_product
    collect: all
    fetch: FETCH
tools:
  get_order: {mutating: false}
  get_product: {mutating: false}
  exchange_items: {}
"""
TOOLS = [
    ToolInfo("get_order", frozenset({"order_id"}), mutating=False),
    ToolInfo("get_product", frozenset({"product_id"}), mutating=False),
    ToolInfo("exchange_items", frozenset({"order_id", "item_ids"}), mutating=True),
]
GOOD = "facts.order.items.filter(i, i.item_id in args.item_ids).map(i, {'product_id': i.product_id})"


def problems(fetch: str, tools: list[ToolInfo] = TOOLS) -> list[str]:
    text = textwrap.dedent(BASE).replace("FETCH", f'"{fetch}"')
    checklist = parse_checklist(text, file="shop.yaml")
    return [f"{p.field}: {p.message}" for p in validate_checklist(checklist, tools=tools) if p.severity == "error"]


def test_a_fetch_over_the_order_read_by_product_id_is_clean() -> None:
    assert problems(GOOD) == []


@pytest.mark.parametrize(
    ("fetch", "fragment"),
    [
        ("facts.order.items.map(i, {'product_id': i.product_id", "does not compile"),
        ("user.items.map(i, {'product_id': i})", "unknown variable(s) ['user']"),
        ("facts.basket.map(i, {'product_id': i})", "fact 'basket' is not declared"),
        ("facts.products.map(p, {'product_id': p.product_id})", "fetches by itself"),
        ("facts.order.items.map(i, {'sku': i.product_id})", "no parameter 'sku'"),
        ("facts.order.items.map(i, {'product_id': i.product_id, 'cabin': 1})", "no parameter 'cabin'"),
    ],
    ids=["syntax", "variable", "undeclared-fact", "itself", "not-a-parameter", "second-key"],
)
def test_a_bad_fetch_is_an_error_on_its_field(fetch: str, fragment: str) -> None:
    found = problems(fetch)
    assert any(p.startswith("facts.products.fetch: ") and fragment in p for p in found), found


def test_a_fetch_of_a_tool_the_agent_declares_writing_is_refused() -> None:
    writes = [t if t.name != "get_product" else ToolInfo("get_product", t.parameters, mutating=True) for t in TOOLS]
    assert any("writes state; the guard only calls read tools" in p for p in problems(GOOD, writes))
