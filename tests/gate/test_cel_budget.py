"""A check's cost is bounded per decision: too costly is a block naming the check, never a frozen process."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import load_checklist
from policyguard.decision import Decision
from policyguard.gate.cel import Activation, CelBudgetError, compile_check
from policyguard.gate.celcost import (
    DECISION_BUDGET,
    ISOLATED_SECONDS,
    MAX_STEPS,
    STEP_SECONDS,
    Bound,
    Summary,
    estimate,
    parse,
)
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

from .conftest import NOW

ITEMS_IN_ORDER = (
    "args.item_ids.size() > 0 && args.item_ids.all(i, args.item_ids.filter(x, x == i).size()"
    " <= facts.order.items.filter(x, x.item_id == i).size())"
)
CHECKLIST = f"""
schema_version: 1
policy: {{name: budget, version: "sha256:{"0" * 64}"}}
facts:
  order: {{tool: get_order, match: {{order_id: args.order_id}}}}
tools:
  get_order: {{mutating: false}}
  modify_items:
    mutating: true
    requirements:
      - id: items-in-order
        text: Every item to change is in the order.
        kind: data
        source: "Each item to change must be in the order."
        prerequisites: [get_order]
        check: '{ITEMS_IN_ORDER}'
"""


def _variables(n: int, order_items: int = 5) -> dict[str, object]:
    ids = [str(k) for k in range(n)]
    return {"args": {"item_ids": ids}, "facts": {"order": {"items": [{"item_id": str(k)} for k in range(order_items)]}}}


def test_the_estimate_grows_with_the_input_as_the_check_does() -> None:
    """Quadratic filter inside all: a list 10x longer costs far more than 10x."""
    tree = parse(ITEMS_IN_ORDER)
    small, large = (estimate(tree, Summary(_variables(n))) for n in (5, 50))
    assert 0 < small < DECISION_BUDGET
    assert large > 100 * small


def test_the_cheap_bound_is_never_below_the_estimate() -> None:
    tree = parse(ITEMS_IN_ORDER)
    for n in (0, 1, 7, 40):
        variables = _variables(n, order_items=n // 2)
        summary = Summary(variables)
        assert Bound(tree)(summary.largest) >= estimate(tree, summary)


@pytest.mark.parametrize(
    "source",
    [
        'principal == "x" ? args.a : args.a.b',  # a map and the list inside it: their join weighs both
        "[args.a, args.a.b][1]",  # an item of a list literal: any of the items, which add up past the input
        '{"k": args.a, "j": args.a.b}["j"]',  # a value of a map literal: as an item of a list literal
    ],
)
def test_the_cheap_bound_covers_values_that_together_weigh_more_than_the_input(source: str) -> None:
    """The estimate joins values it holds apart (their weights add up); the bound took every value as at most
    the whole input's weight, and was 7,087 under an estimate of 9,031 for the first at 1,000 items."""
    tree = parse(f"({source}).all(v, true)")
    for n in (10, 1_000, 20_000):
        summary = Summary({"args": {"a": {"b": list(range(n))}}, "principal": "x"})
        assert Bound(tree)(summary.total) >= estimate(tree, summary)


def _composites() -> st.SearchStrategy[str]:
    """Values built from the parts of one nested input: branches, literals, sums, filters and maps of them."""
    return st.recursive(
        st.sampled_from(["args", "args.a", "args.a.b", "args.a.c", "args.a.d", "1"]),
        lambda inner: st.one_of(
            st.builds(lambda x, y: f'(principal == "x" ? {x} : {y})', inner, inner),
            st.builds(lambda x, y: f"[{x}, {y}]", inner, inner),
            st.builds(lambda x, y: f"[{x}, {y}][1]", inner, inner),
            st.builds(lambda x, y: f'{{"k": {x}, "j": {y}}}["j"]', inner, inner),
            st.builds(lambda x, y: f"({x} + {y})", inner, inner),
            st.builds(lambda x: f"({x}).filter(v, true)", inner),
            st.builds(lambda x: f"({x}).map(v, v)", inner),
            st.builds(lambda x: f"({x}).b", inner),
        ),
        max_leaves=4,
    )


@settings(max_examples=300, deadline=None)
@given(
    _composites(),
    st.sampled_from(["{}.all(v, true)", "{}.exists(v, v == v)", "{}.map(v, v).size() > 0", "size({}) > 0"]),
    st.integers(0, 3_000),
)
def test_the_cheap_bound_is_never_below_the_estimate_of_values_built_from_a_large_input(
    value: str, use: str, n: int
) -> None:
    tree = parse(use.format(f"({value})"))
    summary = Summary({"args": {"a": {"b": list(range(n)), "c": "x" * n, "d": [[0]] * (n % 7)}}, "principal": "x"})
    assert Bound(tree)(summary.total) >= estimate(tree, summary)


def test_a_value_read_from_a_map_literal_is_charged_as_what_it_holds() -> None:
    """A map literal's index reads its values; the estimate took its keys (a literal string: nothing), so a
    comprehension over ``{"k": args.l}["k"]`` was charged for no items at all."""
    summary = Summary({"args": {"l": list(range(50_000))}})
    direct = estimate(parse("args.l.all(v, v >= 0)"), summary)
    assert estimate(parse('{"k": args.l}["k"].all(v, v >= 0)'), summary) >= direct > 50_000


def test_a_check_over_the_hard_limit_is_blocked_naming_it_without_being_evaluated() -> None:
    program = compile_check(ITEMS_IN_ORDER)
    started = time.perf_counter()
    with pytest.raises(CelBudgetError, match=f"over the limit of {MAX_STEPS:,}"):
        program.holds(Activation(_variables(20_000)))
    assert time.perf_counter() - started < 5  # evaluating it would take minutes


def test_a_check_over_the_budget_runs_apart_and_is_stopped_after_its_time() -> None:
    program = compile_check("args.a.all(x, !(x in args.b))")  # estimated 36M steps: seconds in-process, holding the GIL
    ids = [str(k) for k in range(6_000)]
    activation = Activation({"args": {"a": ids, "b": [f"other-{i}" for i in ids]}})
    started = time.perf_counter()
    with pytest.raises(CelBudgetError, match="evaluated apart: still running after"):
        program.holds(activation)
    assert time.perf_counter() - started < ISOLATED_SECONDS + 60  # + the worker's one cold start
    assert activation.isolated_left <= 0


def test_a_check_over_the_budget_that_finishes_apart_gives_the_same_answer() -> None:
    program = compile_check(ITEMS_IN_ORDER)
    variables = _variables(60, order_items=60)
    assert program.holds(Activation(variables, budget=0)) is program.holds(Activation(variables, budget=10**12))


def test_the_gate_blocks_a_too_costly_call_naming_the_check_and_decides_small_calls_as_before(tmp_path: Path) -> None:
    path = tmp_path / "checklist.yaml"
    path.write_text(CHECKLIST, encoding="utf-8")
    checklist = load_checklist(path)
    gate = HardGate(checklist)
    context = CheckContext(checklist=checklist, policy_text="", now=NOW, principal=None)
    read = ToolCall(id="r1", name="get_order", arguments={"order_id": "o1"})
    order = '{"order_id": "o1", "items": [{"item_id": "1"}, {"item_id": "2"}]}'

    def decide(ids: list[str]) -> Decision:
        call = ToolCall(id="w1", name="modify_items", arguments={"order_id": "o1", "item_ids": ids})
        trajectory = Trajectory(
            messages=[
                Message(role="assistant", tool_calls=[read]),
                Message(role="tool", tool_call_id="r1", name="get_order", content=order),
                Message(role="assistant", tool_calls=[call]),
            ]
        )
        return gate.check(call, trajectory, context)

    assert decide(["1", "2"]).outcome == "escalate"
    assert decide(["1", "1"]).outcome == "block"
    big = decide([str(k) for k in range(30_000)])
    assert big.outcome == "block"
    assert "items-in-order" in (big.message or "")
    assert "items-in-order: its cost on this call's values is estimated at" in (big.error or "")
    assert f"over the limit of {MAX_STEPS:,}" in (big.error or "")


# --- the budget is charged what a check took, once it has run ---------------------------------------

OVER_ESTIMATED = "args.a.all(x, args.a.exists(y, y == x && facts.b.exists(z, z == y)))"  # stops at once on these values


def _record_apart(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    apart: list[str] = []

    def isolated(self: Activation, source: str, roots: object = None) -> bool:
        apart.append(source)
        return True

    monkeypatch.setattr(Activation, "isolated", isolated)
    return apart


def test_honest_checks_whose_estimates_add_up_past_the_budget_all_run_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each estimate is most of the budget, each run takes microseconds: the budget is charged the microseconds."""
    apart = _record_apart(monkeypatch)
    program = compile_check(OVER_ESTIMATED)
    activation = Activation({"args": {"a": [str(k) for k in range(20)]}, "facts": {"b": [str(k) for k in range(20)]}})
    assert program._cost is not None
    estimated = estimate(program._cost[0], activation.view(program._roots).summary())
    assert DECISION_BUDGET // 2 < estimated <= DECISION_BUDGET  # two of them overrun the budget by their estimates
    for _ in range(10):
        assert program.holds(activation) is True
    assert apart == []
    assert activation.spent < DECISION_BUDGET // 2


def test_the_engine_time_of_a_decision_stays_within_the_budgets_time_plus_the_last_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checks that really take time: they run here until their times fill the budget, then go apart.

    Every check admitted before the last one started with what was spent (their measured times) within the
    budget, so they took at most DECISION_BUDGET x STEP_SECONDS (50 ms) in all; the last fit the rest by its
    estimate.
    """
    apart = _record_apart(monkeypatch)
    program = compile_check('args.a.all(x, facts.b.exists(y, y.k == "none"))')  # scans facts.b once per x

    def decision() -> list[float]:
        """The wall times of the checks one decision ran in process, with the collector off (a collection of
        the test process's heap once took 100 ms inside one check's timing, outside the engine)."""
        activation = Activation({"args": {"a": [0, 1]}, "facts": {"b": [{"k": str(k)} for k in range(1_000)]}})
        times: list[float] = []
        gc.disable()
        try:
            for _ in range(400):
                before = len(apart)
                started = time.perf_counter()
                program.holds(activation)
                if len(apart) == before:
                    times.append(time.perf_counter() - started)
        finally:
            gc.enable()
        return times

    # the best of three decisions: a scheduler pause on a shared machine is noise, a budget that does not hold
    # (every check admitted: 400 x ~1 ms) fails all three
    runs = [decision() for _ in range(3)]
    assert apart, "the budget never ran out"
    assert all(len(times) > 1 for times in runs)  # more than the one check its estimate alone would admit
    assert min(sum(times[:-1]) for times in runs) <= DECISION_BUDGET * STEP_SECONDS + 0.01  # + the timing's overhead


# --- [0, 1, ..., 15].filter(k, k < args.x.size()): as many rounds as the list has items ----------------

INDEXED = (
    "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].filter(k, k < args.ids.size() - 1).all(k, facts.b.exists(y, y == args.ids[k]))"
)


def _indexed_estimate(source: str, ids: object) -> int:
    tree = parse(source)
    return estimate(tree, Summary({"args": {"ids": ids}, "facts": {"b": [str(k) for k in range(200)]}}))


def test_an_index_loop_is_estimated_by_the_length_it_is_cut_to_not_the_literal() -> None:
    """Ten rounds are written, k < args.ids.size() - 1 keeps one for two ids: the body is counted once, not ten times."""
    two, ten = _indexed_estimate(INDEXED, ["a", "b"]), _indexed_estimate(INDEXED, [str(k) for k in range(10)])
    assert 5 * two < ten
    assert Bound(parse(INDEXED))(10_000) >= ten  # the cheap bound still counts the ten


def test_an_index_loop_over_what_is_not_a_path_to_a_list_keeps_the_literals_length() -> None:
    """A string's size is its characters (summarised by 256), a comprehension variable's is merged: no cut."""
    cut = _indexed_estimate(INDEXED, ["a", "b"])
    assert _indexed_estimate(INDEXED, "ab") > 2 * cut  # a 2-character string: ten rounds (+ the filter, same)
    rebound = "[{'ids': ['a', 'b']}].all(args, " + INDEXED + ")"  # args is no longer the call's arguments
    assert _indexed_estimate(rebound, ["a", "b"]) > 2 * cut
    repeated = INDEXED.replace("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]")
    assert _indexed_estimate(repeated, ["a", "b"]) > 2 * cut  # all ten pass k < 1
