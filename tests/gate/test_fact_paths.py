"""Only the parts of the facts a check reads are handed to the CEL engine - and a check never notices.

The gate prunes each fact to the paths its checks can read (speed: converting a
value for the engine costs ~2 us per string or number). Pruning must be
invisible: every expression gives the same value, or the same error, on the
pruned facts as on the whole ones. The property tests below try expressions
built to catch a path the analysis misses (macros, filters whose elements flow
on, bound variables, shadowing, strings with parentheses, comments, indexes).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.gate.cel import CelEvalError, compile_check
from policyguard.gate.factpaths import closing_paren, paths_trie, prune, prune_facts, read_paths

NOW = datetime(2024, 5, 15, 15, 0, tzinfo=timezone.utc)

EXPRESSIONS = [
    "facts.order.status == 'delivered'",
    "has(facts.order.status)",
    "!has(facts.order.status) || facts.order.status != 'cancelled'",
    "has(facts.order.x.y)",
    "facts.order.items.size() > 1",
    "size(facts.order)",
    "facts.order == {'status': 'delivered'}",
    "facts.order.items.all(i, i.price < 100)",
    "facts.order.items.exists(i, has(i.gift) && i.gift)",
    "facts.order.items.exists_one(i, i.price == 5)",
    "facts.order.items.map(i, i.price).size() >= 0",
    "facts.order.items.map(i, i)[0] == {'price': 5}",
    "facts.order.items.filter(i, i.price > 1).size() == 1",
    "facts.order.items.filter(i, i.price > 1)[0].name == 'a'",
    "facts.order.items.filter(i, i.price > 1) == []",
    "facts.order.items.filter(i, i.price > 1).all(j, has(j.name))",
    "facts.order.items.all(i, i.tags.all(t, t != ')'))",
    "facts.order.items.all(i, i.tags.exists(i, i == 'x') || has(i.name))",
    "facts.order.items.all(i, cel.bind(j, i, has(j.name)))",
    "cel.bind(o, facts.order, has(o.status))",
    "facts['order'].status == 'x'",
    "facts.order.items[0].price == 5",
    "facts.order.meta.exists(k, k == 'a')",
    "facts.order.meta.a == 1 && facts.order.meta.exists(k, facts.order.meta[k] == 1)",
    'facts.order.items.all(i, "(" != i.name) && has(facts.order.status)',
    "facts.calls.all(c, c.error || c.result != null)",
    "facts.calls.filter(c, has(c.args.amount) && !c.error).size() == 0",
    "facts.calls.all(c, c.result != null && c.result.status == 'open')",
    "facts.calls.all(c, c.result != null && c.result.items.exists(i, i.price > 1))",
    "facts.calls.exists(c, c.result == null ? false : c.result == {'status': 'open'})",
    "facts.calls.exists(c, [c.result] == [null])",
    "facts.calls.exists(c, !c.error && c.result != null)",
    "facts.calls.exists(c, c.result.status != null)",
    "facts.order.x.y == null || facts.order.x == {'y': null}",
    "facts.order.x != null && facts.order.x.y != null",
    "facts.order.x.y != null && facts.order.x != null",
    "facts.order.items != null && facts.order.items.size() > 0",
    "facts.calls.map(c, c.args).exists(a, has(a.amount))",
    "facts.order.items.all(i, // a comment with ( and facts.zzz\n i.price > 0)",
    "facts.order.status.startsWith('del')",
    "[facts.order.items.map(i, i.price)].all(s, s.filter(x, x > 1).size() <= 1)",
    "facts.order.items.all(i, facts.order.items.exists(j, j.price == i.price))",
    "facts.order.items.all(i, r'\\)' != i.name)",
]

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 200), st.sampled_from(["a", "x", ")", "delivered", "cancelled"])
)
item = st.fixed_dictionaries(
    {},
    optional={
        "price": st.integers(0, 200),
        "name": st.sampled_from(["a", "b", "("]),
        "gift": st.booleans(),
        "tags": st.lists(st.sampled_from(["x", ")", "y"]), max_size=3),
        "extra": json_leaf,
    },
)
order = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["delivered", "cancelled", "open"]),
        "items": st.lists(item, max_size=4),
        "meta": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2),
        "x": st.dictionaries(st.sampled_from(["y", "z"]), json_leaf, max_size=2),
        "noise": st.lists(json_leaf, max_size=3),
    },
)
call = st.fixed_dictionaries(
    {"error": st.booleans(), "result": st.one_of(st.none(), order)},
    optional={"args": st.dictionaries(st.sampled_from(["amount", "id"]), st.integers(0, 9), max_size=2)},
)
facts_strategy = st.fixed_dictionaries({"order": order, "calls": st.lists(call, max_size=3)}, optional={"zzz": order})


def _outcome(expression: str, facts: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "value", compile_check(expression).evaluate({"args": {}, "facts": facts, "principal": None, "now": NOW})
    except CelEvalError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("expression", EXPRESSIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(facts=facts_strategy)
def test_a_pruned_fact_gives_every_expression_the_same_value_or_error(expression: str, facts: dict[str, Any]) -> None:
    """Pruned to what the expression reads, the facts evaluate exactly as the whole facts do."""
    paths = read_paths(expression)
    pruned = facts if paths is None else prune_facts(facts, paths_trie([paths]))
    assert _outcome(expression, pruned) == _outcome(expression, facts)


@settings(max_examples=60, deadline=None)
@given(facts=facts_strategy, chosen=st.lists(st.sampled_from(EXPRESSIONS), min_size=2, max_size=5))
def test_facts_pruned_for_several_checks_serve_each_of_them(facts: dict[str, Any], chosen: list[str]) -> None:
    """The gate prunes once per tool for all its checks: the union must serve every one of them."""
    paths = [read_paths(e) for e in chosen]
    if any(p is None for p in paths):
        return
    pruned = prune_facts(facts, paths_trie(p for p in paths if p is not None))
    for expression in chosen:
        assert _outcome(expression, pruned) == _outcome(expression, facts)


def test_paths_name_the_fields_read_and_the_elements_a_macro_reads() -> None:
    assert read_paths("facts.order.items.size() > 0 && has(facts.order.status)") == {
        ("order", "items"),
        ("order", "status"),
    }
    assert read_paths("facts.calls.all(c, c.error || c.result != null)") == {
        ("calls", "[]", "error"),
        ("calls", "[]", "result", "?"),
    }


def test_a_null_test_alone_keeps_the_value_present_and_pruned_by_deeper_reads() -> None:
    """``c.result != null`` reads only null-ness: with a deeper read the result keeps just that field."""
    paths = read_paths("facts.calls.all(c, c.result != null && c.result.status == 'open')")
    assert paths is not None
    calls = [{"result": {"status": "open", "items": [1, 2]}, "error": False}, {"result": None, "error": True}]
    assert prune_facts({"calls": calls}, paths_trie([paths])) == {
        "calls": [{"result": {"status": "open"}}, {"result": None}]
    }
    alone = read_paths("facts.calls.all(c, c.error || c.result != null)")
    assert alone is not None
    assert prune_facts({"calls": calls}, paths_trie([alone])) == {
        "calls": [{"result": {}, "error": False}, {"result": None, "error": True}]
    }
    assert read_paths("1 + facts.a.b == null") == {("a", "b")}  # not a whole operand: read whole


@pytest.mark.parametrize(
    "expression",
    ["facts['order'].status == 'x'", "cel.bind(f, facts, f.order.status)", "facts.`order`.status", "size(facts) > 0"],
)
def test_a_use_of_facts_that_is_not_a_field_path_keeps_every_fact_whole(expression: str) -> None:
    assert read_paths(expression) is None


def test_filtered_elements_that_flow_on_are_kept_whole() -> None:
    """``filter(...)[0].x`` reads fields of the elements outside the macro: the elements stay whole."""
    assert read_paths("facts.o.items.filter(i, i.p > 1)[0].name == 'a'") == {("o", "items")}
    assert read_paths("facts.o.items.filter(i, i.p > 1).size() == 1") == {("o", "items", "[]", "p")}


def test_a_shorter_path_keeps_its_whole_subtree() -> None:
    trie = paths_trie([frozenset({("a", "b", "c")}), frozenset({("a", "b"), ("z",)})])
    assert prune_facts({"a": {"b": {"c": 1, "d": 2}, "e": 3}, "z": [1], "y": 0}, trie) == {
        "a": {"b": {"c": 1, "d": 2}},
        "z": [1],
    }


def test_a_map_iterated_by_a_macro_is_kept_whole() -> None:
    """A macro over an object iterates its keys: pruning its values by element paths would drop keys."""
    assert prune({"k1": {"v": 1, "w": 2}}, {"[]": {"v": {}}}) == {"k1": {"v": 1, "w": 2}}
    assert prune([{"v": 1, "w": 2}], {"[]": {"v": {}}}) == [{"v": 1}]


def test_the_closing_parenthesis_skips_strings_and_comments() -> None:
    source = "f(a, \")\", ')', '''x)''', r\"\\\", // )\n b)"
    assert closing_paren(source, 1) == len(source) - 1
    assert closing_paren('f(a, "unterminated)', 1) is None
    assert closing_paren('f("\\")", b)', 1) == 10  # an escaped quote does not end the string
    assert closing_paren("f(a]", 1) is None
