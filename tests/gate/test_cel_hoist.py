"""A check runs rewritten with its ``args``/``facts`` paths as variables, and decides exactly as written.

The rewrite only changes what the engine copies (:mod:`policyguard.gate.celhoist`). What it must never change:
the value of a check, whether it fails, and the words of its failure - on any values, shipped checks and
generated ones alike.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import load_checklist
from policyguard.gate.cel import Activation, CelEvalError, CheckProgram, compile_check, union_hoists
from policyguard.gate.celcost import ISOLATED_SECONDS, estimate, parse
from policyguard.gate.celhoist import MISSING, Hoist, hoist, hoist_name

CHECKLISTS = sorted((Path(__file__).resolve().parents[2] / "checklists").glob("*.yaml"))
NOW = datetime(2024, 5, 15, 15, tzinfo=timezone.utc)


def _rewrite(source: str) -> tuple[str, frozenset[Hoist]] | None:
    return hoist(source, parse(source))


def _as_written(program: CheckProgram) -> CheckProgram:
    return dataclasses.replace(program, _rewrite=None)


def _outcome(program: CheckProgram, activation: Activation) -> tuple[str, Any]:
    try:
        return "value", program.evaluate(activation)
    except CelEvalError as exc:
        return "error", str(exc)


# --- what is rewritten --------------------------------------------------------------------------------------


def test_each_field_path_becomes_one_variable() -> None:
    rewritten = _rewrite("facts.reservation.user_id == principal && args.amount <= 500")
    assert rewritten is not None
    text, hoists = rewritten
    assert {(item.root, item.path, item.has) for item in hoists} == {
        ("facts", ("reservation", "user_id"), False),
        ("args", ("amount",), False),
    }
    names = {item.path: item.name for item in hoists}
    assert text == f"{names['reservation', 'user_id']} == principal && {names['amount',]} <= 500"


def test_a_path_stops_before_a_method_an_index_or_a_comprehension() -> None:
    rewritten = _rewrite("facts.r.flights.exists(f, f.date == args.flights[0].date) && facts.r.flights.size() > 1")
    assert rewritten is not None
    assert {item.path for item in rewritten[1]} == {("r", "flights"), ("flights",)}
    assert ".exists(f, f.date == " in rewritten[0] and "[0].date)" in rewritten[0]


def test_has_of_a_fact_is_a_boolean_and_has_of_a_field_tests_the_hoisted_map() -> None:
    rewritten = _rewrite("has(facts.user) && has(facts.user.membership)")
    assert rewritten is not None
    text, hoists = rewritten
    assert {(item.path, item.has) for item in hoists} == {(("user",), True), (("user",), False)}
    boolean = hoist_name("facts", ("user",), True)
    assert text == f"{boolean} && has({hoist_name('facts', ('user',), False)}.membership)"


def test_a_quoted_key_is_a_path_step_and_a_field_of_another_value_named_args_is_not_a_root() -> None:
    rewritten = _rewrite('args["order id"] == "x" && facts.calls.all(c, c.args.date == "d")')
    assert rewritten is not None
    assert {(item.root, item.path) for item in rewritten[1]} == {("args", ("order id",)), ("facts", ("calls",))}
    assert "c.args.date" in rewritten[0]


@pytest.mark.parametrize(
    "source",
    [
        "args.size() > 0",  # the whole map
        'facts["a"].size() > 0 && facts.size() > 1',
        "args.items.all(facts, facts > 0) && facts.a == 1",  # a comprehension variable named facts
        "args.items.all(_pgv_args_61, _pgv_args_61 > 0)",  # one named like a hoisted variable
        "args[r'raw'] == 1",
        'facts["a\\x62"] == 1',  # an escape: the key must be read as the engine reads it
    ],
)
def test_a_check_that_reads_a_whole_map_or_shadows_a_root_runs_as_written(source: str) -> None:
    assert _rewrite(source) is None
    assert compile_check(source)._hoisted is None


@given(st.lists(st.text(max_size=4), min_size=1, max_size=3), st.lists(st.text(max_size=4), min_size=1, max_size=3))
def test_two_different_paths_never_share_a_variable(first: list[str], second: list[str]) -> None:
    for has in (False, True):
        same = hoist_name("facts", tuple(first), has) == hoist_name("facts", tuple(second), has)
        assert same == (first == second)
    assert hoist_name("facts", tuple(first), True) != hoist_name("facts", tuple(first), False)
    assert hoist_name("args", tuple(first), False) != hoist_name("facts", tuple(first), False)


def test_a_path_through_anything_but_a_plain_map_is_left_out_of_the_context() -> None:
    item = Hoist("n", "facts", ("a", "b"))
    assert item.value({"facts": {"a": {"b": None}}}) is None
    assert item.value({"facts": {"a": [1]}}) is MISSING
    assert item.value({"facts": {"a": "b"}}) is MISSING
    assert item.value({"facts": {}}) is MISSING
    assert Hoist("h", "facts", ("a", "b"), has=True).value({"facts": {"a": {"c": 1}}}) is False
    assert Hoist("h", "facts", ("a", "b"), has=True).value({"facts": {"a": ["b"]}}) is MISSING


# --- it decides as written ------------------------------------------------------------------------------------


def test_a_rewritten_check_that_can_be_evaluated_is_not_evaluated_again_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    program = compile_check("facts.reservation.user_id == principal && has(facts.user)")

    def as_written(*_: Any) -> Any:
        raise AssertionError("the check ran as written")

    monkeypatch.setattr(CheckProgram, "_execute", as_written)
    assert program.holds({"facts": {"reservation": {"user_id": "u", "flights": [1] * 50}}, "principal": "u"}) is False
    assert program.holds({"facts": {"reservation": {"user_id": "u"}, "user": {}}, "principal": "u"}) is True


def test_a_failing_rewritten_check_fails_in_the_words_of_the_check_as_written() -> None:
    program = compile_check("facts.reservation.user_id == principal")
    assert program._hoisted is not None
    with pytest.raises(CelEvalError) as caught:
        program.holds({"facts": {"reservation": {}}, "principal": "u"})
    assert "no such key or field 'user_id'" in str(caught.value)
    assert "_pg" not in str(caught.value)


def _shipped_checks() -> list[tuple[str, Any]]:
    found = []
    for path in CHECKLISTS:
        checklist = load_checklist(path)
        requirements = [r for spec in checklist.tools.values() for r in spec.requirements]
        requirements += checklist.general_rules
        found += [(f"{path.stem}:{r.id}", r) for r in requirements if r.check is not None]
    return found


SHIPPED = _shipped_checks()


def test_every_shipped_engine_check_runs_rewritten() -> None:
    programs = {rid: compile_check(req.check) for rid, req in SHIPPED}
    engine = {rid: p for rid, p in programs.items() if p._path is None}
    assert len(engine) > 60
    assert [rid for rid, p in engine.items() if p._hoisted is None] == []


@pytest.mark.parametrize(("rid", "req"), SHIPPED, ids=[rid for rid, _ in SHIPPED])
def test_each_shipped_check_decides_its_examples_as_written(rid: str, req: Any) -> None:
    program = compile_check(req.check)
    for example in req.examples:
        variables = {"args": example.args, "facts": example.facts, "principal": example.principal, "now": NOW}
        assert _outcome(program, Activation(variables)) == _outcome(_as_written(program), Activation(variables))


# --- generated checks over generated values: same value, same failure ----------------------------------------

KEYS = ("a", "b", "c")
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["x", "y", ""]), st.just(1.5))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, min_size=1, max_size=3)
    ),
    max_leaves=12,
)
MAPS = st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=2, max_size=3)  # most paths resolve, some do not


@st.composite
def _paths(draw: st.DrawFn) -> str:
    root = draw(st.sampled_from(["args", "facts"]))
    steps = draw(st.lists(st.sampled_from([".a", ".b", ".c", '["a"]', "['b']"]), min_size=1, max_size=2))
    return root + "".join(steps)


LITERALS = st.sampled_from(["1", "1.5", '"x"', "null", "true", "[1]", '{"a": 1}', '{"a": 1, "b": 2}', '[{"a": 1}]'])


def _checks() -> st.SearchStrategy[str]:
    atoms = st.one_of(
        st.builds(lambda p, v: f"{p} == {v}", _paths(), LITERALS),
        st.builds(lambda p: f"has({p})", _paths().filter(lambda p: p.endswith((".a", ".b", ".c")))),
        st.builds(lambda p: f"{p}.size() > 0", _paths()),
        st.builds(lambda p, v: f"{p}.exists(v, v == {v})", _paths(), LITERALS),
        st.builds(lambda p: f"{p}.all(v, has(v.a))", _paths()),
        st.builds(lambda p, q: f"{p} in {q}", _paths(), _paths()),
        st.builds(lambda p: f"principal == {p}", _paths()),
        # what a value is cut to before the engine gets it (policyguard.gate.celproject) must not show
        st.builds(lambda p, v: f"{p}.exists(v, v.a == {v})", _paths(), LITERALS),
        st.builds(lambda p: f"{p}.all(v, v.b != null && type(v.c) == type({{}}))", _paths()),
        st.builds(lambda p, v: f"{p}.filter(v, has(v.a)).size() > {v}", _paths(), st.sampled_from(["0", "1"])),
        st.builds(lambda p, v: f"{p}.filter(v, v.a == 1) == [{v}]", _paths(), LITERALS),
        st.builds(lambda p, v: f"{p}.filter(v, true)[0].b == {v}", _paths(), LITERALS),
        st.builds(lambda p, v: f"{p}.map(v, v.a).exists(w, w == {v})", _paths(), LITERALS),
        st.builds(lambda p, v: f"{p}.map(v, v).exists(w, w == {v})", _paths(), LITERALS),
        st.builds(lambda p, v: f"[{p}].all(v, v.a == {v})", _paths(), LITERALS),
        st.builds(lambda p, q, v: f"[{p}, {q}][1].c == {v}", _paths(), _paths(), LITERALS),
        st.builds(lambda p, q, v: f"({p} == null ? {q} : {p}).a == {v}", _paths(), _paths(), LITERALS),
        st.builds(lambda p, v: f"size({p}) == {v}", _paths(), st.sampled_from(["0", "1", "2"])),
        st.builds(lambda p, q, v: f"{p}[{q}] == {v}", _paths(), _paths(), LITERALS),
        # (not {p}[k].b: over a map, which key the engine tries first is random, and so is the failure it names)
        st.builds(lambda p, v: f"{p}.exists(k, {p}[k] == {v})", _paths(), LITERALS),
        st.builds(lambda p: f"{p}.exists(k, k == 'a' || k == 1)", _paths()),
        st.builds(lambda p, v: f"{v} in {p}", _paths(), LITERALS),
        st.builds(lambda p: f"{p}.exists(v, v.a.exists(w, w.b == 1))", _paths()),
        st.builds(lambda p, q: f"{p}.a in {q}", _paths(), _paths()),
        st.builds(lambda p, v: f"{p}.b == {v}", _paths(), LITERALS),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.builds(lambda x, y: f"({x} && {y})", inner, inner),
            st.builds(lambda x, y: f"({x} || {y})", inner, inner),
            st.builds(lambda x: f"!({x})", inner),
            st.builds(lambda x, y, z: f"({x} ? {y} : {z})", inner, inner, inner),
        ),
        max_leaves=4,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_checks(), _checks(), MAPS, MAPS, st.sampled_from([None, "x"]))
def test_a_rewritten_check_gives_the_value_or_the_failure_of_the_check_as_written(
    source: str, other: str, args: dict[str, Any], facts: dict[str, Any], principal: str | None
) -> None:
    program = compile_check(source)
    assert program._hoisted is not None
    variables = {"args": args, "facts": facts, "principal": principal, "now": NOW}
    expected = _outcome(_as_written(program), Activation(variables))
    assert _outcome(program, Activation(variables)) == expected
    # beside another check of the decision, sharing one context of both checks' paths
    shared = Activation(variables, hoists=union_hoists([program, compile_check(other)]))
    assert _outcome(compile_check(other), shared)[0] in ("value", "error")
    assert _outcome(program, shared) == expected
    # after another check on one activation without a decision's paths: each check's values cut for it
    alone = Activation(variables)
    assert _outcome(compile_check(other), alone)[0] in ("value", "error")
    assert _outcome(program, alone) == expected


def test_a_path_the_call_lacks_is_charged_as_the_failure_it_is_not_as_the_largest_value() -> None:
    """As written, ``facts.x.items`` on a record without ``items`` stops with an error at once, and the estimate
    says so; rewritten, the missing variable must not be charged as if it held the whole input (a 20,000-item
    fact beside it would send a true check to the worker process, or refuse it)."""
    program = compile_check("!has(facts.x.items) || facts.x.items.all(i, facts.big.exists(b, b == i))")
    variables = {"facts": {"x": {"id": 1}, "big": list(range(20_000))}, "principal": None}
    activation = Activation(variables)
    assert program.holds(activation) is True
    assert activation.spent > 0  # admitted by its estimate and evaluated here, not sent apart
    assert activation.isolated_left == pytest.approx(ISOLATED_SECONDS)


def _estimates(program: CheckProgram, variables: dict[str, Any]) -> tuple[int, int]:
    """(as written, rewritten): each form's estimate over what it reads."""
    hoisted = program._hoisted
    assert hoisted is not None and program._cost is not None
    activation = Activation(variables)
    written = estimate(program._cost[0], activation.view(program._roots).summary())
    return written, estimate(hoisted.tree, activation._hoisted_set(hoisted.hoists).summary())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_checks(), MAPS, MAPS)
def test_rewriting_never_makes_a_check_look_costlier(source: str, args: dict[str, Any], facts: dict[str, Any]) -> None:
    """A rewritten check is charged by its own estimate: were it above the estimate as written, the rewrite
    could send a check apart, or refuse it, that ran here before."""
    written, rewritten = _estimates(compile_check(source), {"args": args, "facts": facts, "principal": "x", "now": NOW})
    assert rewritten <= written


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_checks(), MAPS, MAPS)
def test_the_cheap_bound_is_never_below_the_estimate_either_way(
    source: str, args: dict[str, Any], facts: dict[str, Any]
) -> None:
    """A check whose cheap bound fits the budget is admitted by it, without its estimate: were the bound
    below the estimate, the engine could be handed more work than the budget allows."""
    program = compile_check(source)
    hoisted = program._hoisted
    assert hoisted is not None and program._cost is not None
    activation = Activation({"args": args, "facts": facts, "principal": "x", "now": NOW})
    for (tree, bound), view in (
        (program._cost, activation.view(program._roots)),
        ((hoisted.tree, hoisted.bound), activation._hoisted_set(hoisted.hoists)),
    ):
        assert bound(view.weight()) >= estimate(tree, view.summary())


def test_a_path_the_call_lacks_counts_in_the_weight_the_cheap_bound_is_taken_at() -> None:
    """Rewritten, each path the call lacks is a null the estimate sees (one unit of the input's weight, which
    each item a map() builds copies); the bound was taken at the weight of the values present, 53 steps
    against an estimate of 62 here."""
    program = compile_check("[1, 2, 3].map(v, v).size() == 3 && facts.p.q == 1 && facts.r.s == 1 && facts.t.u == 1")
    hoisted = program._hoisted
    assert hoisted is not None
    view = Activation({"args": {}, "facts": {}, "principal": None})._hoisted_set(hoisted.hoists)
    assert hoisted.bound(view.weight()) >= estimate(hoisted.tree, view.summary()) == 62


def test_a_field_of_a_scalar_is_charged_as_the_failure_it_is_both_ways() -> None:
    """Found by the property above: rewritten, ``v`` below is exactly a's items (nulls), and reading ``v.a`` was
    charged as the whole input; as written, ``args["a"]`` merged a's and b's items, whose fields are known. The
    engine stops at once on a field of a null, so both are charged a step for it."""
    source = '(has(args.a) ? args.b.size() > 0 : args["a"].all(v, has(v.a)))'
    variables = {"args": {"a": [None, None], "b": [{"a": None}]}, "facts": {}, "principal": "x", "now": NOW}
    written, rewritten = _estimates(compile_check(source), variables)
    assert rewritten <= written
    big = {"args": {"l": [None] * 1_000}, "facts": {"big": list(range(20_000))}, "principal": "x", "now": NOW}
    assert max(_estimates(compile_check("args.l.all(v, !has(v.a)) && facts.big.size() > 0"), big)) < 50_000


def test_a_field_of_items_that_are_maps_without_it_or_lists_is_charged_as_the_failure_it_is() -> None:
    """Found by the property above once values were cut to what is read (policyguard.gate.celproject): the
    items ``[[], {}]`` merged into a shape with no known fields, and ``v.a`` was charged as the whole input,
    where ``[[], {"b": null}]`` as written knew the field was not there. A field of a list, or one a map lacks,
    stops the engine at once; the merged shape now knows its fields when any of the items is a map."""
    source = "facts.b.b.exists(v, v.a.exists(w, w.b == 1))"
    variables = {"args": {}, "facts": {"b": {"b": [[], {"b": None}]}}, "principal": "x", "now": NOW}
    written, rewritten = _estimates(compile_check(source), variables)
    assert rewritten <= written < 100


def test_no_shipped_check_looks_costlier_rewritten_on_its_examples() -> None:
    for _, req in SHIPPED:
        program = compile_check(req.check)
        if program._path is not None:
            continue
        for example in req.examples:
            variables = {"args": example.args, "facts": example.facts, "principal": example.principal, "now": NOW}
            written, rewritten = _estimates(program, variables)
            assert rewritten <= written, req.id


def test_threads_that_first_use_one_check_together_each_get_its_answer() -> None:
    """The rewritten form is made on first use, by whichever thread comes first (two may both make it)."""
    from concurrent.futures import ThreadPoolExecutor

    source = "facts.order.items.all(i, i.qty > 0) && facts.order.user == principal"
    cases = [({"order": {"items": [{"qty": q}], "user": "u"}}, "u" if q % 3 else "v") for q in range(-4, 12)]
    expected = [
        _outcome(_as_written(compile_check(source)), Activation({"facts": f, "principal": p})) for f, p in cases
    ]

    def decide(program: CheckProgram, case: tuple[dict[str, Any], str]) -> tuple[str, Any]:
        return _outcome(program, Activation({"facts": case[0], "principal": case[1]}))

    for _ in range(5):
        program = compile_check(source)  # a fresh program: nothing made yet
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(decide, [program] * len(cases), cases))
        assert got == expected
        assert program._hoisted is not None
