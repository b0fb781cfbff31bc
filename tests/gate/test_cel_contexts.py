"""The checks of one decision share one converted context of what they read, unless it is too large.

A check that reads only field paths of ``args`` and ``facts`` runs rewritten (:mod:`policyguard.gate.celhoist`):
its context holds those paths' values. A check that reads a whole map (``args.size()``) runs as written, over
a context of the keys it reads. Either way the checks of a decision share one context while converting it is
cheap.
"""

from __future__ import annotations

import time

from policyguard.gate.cel import Activation, compile_check, union_hoists, union_roots

SMALL = compile_check("facts.a.size() > 0 && args.x == 1")
BOTH = compile_check("facts.a.size() + facts.b.size() > 1")
PATH = compile_check("args.x")  # read without the engine: no keys of its own
WHOLE_ARGS = compile_check("facts.a.size() > 0 && args.size() == 1")  # reads all of args: not rewritten
WHOLE_BOTH = compile_check("facts.a.size() + facts.b.size() > args.size()")


def _hoisted(activation: Activation) -> list[set[str]]:
    """The variables of each rewritten-check context the activation built."""
    return [set(view.variables) for view in activation._hoisted.values() if view.context is not None]


def _views(activation: Activation) -> list[object]:
    return [roots for roots, view in activation._views.items() if view.context is not None]


def test_the_roots_of_a_decision_are_the_keys_its_engine_checks_read() -> None:
    assert union_roots([SMALL, BOTH, PATH]) == (frozenset({"x"}), frozenset({"a", "b"}))
    assert union_roots([SMALL, compile_check("facts.size() > 0")]) == (frozenset({"x"}), None)


def test_checks_of_field_paths_run_rewritten_and_whole_map_reads_as_written() -> None:
    assert SMALL._hoisted is not None and BOTH._hoisted is not None
    assert WHOLE_ARGS._hoisted is None and WHOLE_BOTH._hoisted is None
    assert {(item.root, item.path) for item in union_hoists([SMALL, BOTH, PATH])} == {
        ("facts", ("a",)),
        ("facts", ("b",)),
        ("args", ("x",)),
    }


def test_rewritten_checks_reading_overlapping_facts_convert_them_once() -> None:
    variables = {"args": {"x": 1}, "facts": {"a": [1, 2], "b": [3], "c": "unread"}, "principal": "u"}
    activation = Activation(variables, wide=union_roots([SMALL, BOTH]), hoists=union_hoists([SMALL, BOTH]))
    assert SMALL.holds(activation) is True
    assert BOTH.holds(activation) is True
    (converted,) = _hoisted(activation)  # one context, of the three paths (and principal), not of facts.c
    assert converted == {item.name for item in union_hoists([SMALL, BOTH])} | {"principal"}
    assert _views(activation) == []


def test_checks_reading_whole_maps_share_one_context_of_the_keys_they_read() -> None:
    variables = {"args": {"x": 1}, "facts": {"a": [1, 2], "b": [3], "c": "unread"}}
    activation = Activation(variables, wide=union_roots([WHOLE_ARGS, WHOLE_BOTH]))
    assert WHOLE_ARGS.holds(activation) is True
    assert WHOLE_BOTH.holds(activation) is True
    assert _views(activation) == [(None, frozenset({"a", "b"}))]  # one context, and not of facts.c


def test_a_small_check_is_not_handed_a_shared_context_too_large_to_convert_within_the_budget() -> None:
    """Beside a 200,000-item fact another check reads, a check of facts.a converts only facts.a."""
    big = [{"k": str(i)} for i in range(200_000)]
    for small, reads_big in (
        (SMALL, compile_check("facts.big.size() > 0")),
        (WHOLE_ARGS, compile_check("facts.big.size() > args.size()")),
    ):
        variables = {"args": {"x": 1}, "facts": {"a": [1], "big": big}}
        programs = [small, reads_big]
        activation = Activation(variables, wide=union_roots(programs), hoists=union_hoists(programs))
        started = time.perf_counter()
        assert small.holds(activation) is True
        assert time.perf_counter() - started < 0.05  # converting big would take ~0.3 s
        if small is SMALL:
            assert _hoisted(activation) == [{item.name for item in union_hoists([SMALL])}]
        else:
            assert _views(activation) == [small._roots]
