"""The checks of one decision share one converted context of the facts they read, unless it is too large."""

from __future__ import annotations

import time

from policyguard.gate.cel import Activation, compile_check, union_roots

SMALL = compile_check("facts.a.size() > 0 && args.x == 1")
BOTH = compile_check("facts.a.size() + facts.b.size() > 1")
PATH = compile_check("args.x")  # read without the engine: no keys of its own


def test_the_roots_of_a_decision_are_the_keys_its_engine_checks_read() -> None:
    assert union_roots([SMALL, BOTH, PATH]) == (frozenset({"x"}), frozenset({"a", "b"}))
    assert union_roots([SMALL, compile_check("facts.size() > 0")]) == (frozenset({"x"}), None)


def test_checks_reading_overlapping_facts_convert_them_once() -> None:
    variables = {"args": {"x": 1}, "facts": {"a": [1, 2], "b": [3], "c": "unread"}}
    activation = Activation(variables, wide=union_roots([SMALL, BOTH]))
    assert SMALL.holds(activation) is True
    assert BOTH.holds(activation) is True
    converted = [roots for roots, view in activation._views.items() if view.context is not None]
    assert converted == [(frozenset({"x"}), frozenset({"a", "b"}))]  # one context, and not of facts.c


def test_a_small_check_is_not_handed_a_shared_context_too_large_to_convert_within_the_budget() -> None:
    """Beside a 200,000-item fact another check reads, a check of facts.a converts only facts.a."""
    big = [{"k": str(i)} for i in range(200_000)]
    reads_big = compile_check("facts.big.size() > 0")
    variables = {"args": {"x": 1}, "facts": {"a": [1], "big": big}}
    activation = Activation(variables, wide=union_roots([SMALL, reads_big]))
    started = time.perf_counter()
    assert SMALL.holds(activation) is True
    assert time.perf_counter() - started < 0.05  # converting big would take ~0.3 s
    converted = [roots for roots, view in activation._views.items() if view.context is not None]
    assert converted == [SMALL._roots]
