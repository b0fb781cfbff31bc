"""The cost estimate matches the engine: what runs in-process stays within the budget's time, the rest is sent apart.

The engine copies every list or map it reads (inside a comprehension: once per
iteration) and converts every value it is handed. The estimate charges both
(:mod:`policyguard.gate.celcost`); these tests hold it to the measured engine
with generous margins (the figures are ``benchmarks/bench_cel_cost.py``'s).
"""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import load_checklist
from policyguard.gate.cel import Activation, CelEvalError, CheckProgram, compile_check
from policyguard.gate.celcost import DECISION_BUDGET

ROOT = Path(__file__).resolve().parents[2]
SLACK_S = 0.05  # scheduling noise on a shared 2-core machine, on top of the factor


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cel_cost", ROOT / "benchmarks" / "bench_cel_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(BENCH.SHAPES),
    n=st.integers(min_value=0, max_value=300),
    m=st.integers(min_value=0, max_value=2_000),
    text=st.sampled_from([1, 40, 3_000]),
    rewritten=st.booleans(),
)
def test_measured_time_stays_within_the_stated_factor_of_the_estimate(
    source: str, n: int, m: int, text: int, rewritten: bool
) -> None:
    """Any of the worst shapes over any request shape, run as the gate runs it (its paths as variables) or as
    written: time <= FACTOR x STEP_US x what it is charged (+ noise)."""
    steps, seconds = BENCH.measure(source, BENCH.variables(n, m, text), rewritten=rewritten)
    if seconds is None:  # too large to time here; the gate would not run it in-process either
        assert steps > DECISION_BUDGET
        return
    assert seconds <= BENCH.FACTOR * BENCH.STEP_US * 1e-6 * steps + SLACK_S, (source, n, m, text, steps, seconds)


def test_a_copy_in_a_comprehension_is_charged_per_iteration() -> None:
    """As written, reading facts.b inside all() copies it each time: 10x the iterations is ~10x the estimate,
    not +10 steps. Rewritten, facts.b is a variable, read by reference, and is charged so; a copy that
    survives the rewrite - an index - is still charged per iteration."""
    costs = [BENCH.measure("args.a.all(x, facts.b.size() > 0)", BENCH.variables(n, 1_000), rewritten=False)[0]
             for n in (10, 100)]  # fmt: skip
    assert costs[1] > 8 * costs[0] > 8 * 1_000 * 10
    variables = [BENCH.variables(n, 1_000) for n in (10, 100)]
    written = [BENCH.measure("args.a.all(x, facts.b != null)", v, rewritten=False)[0] for v in variables]
    costs = [BENCH.measure("args.a.all(x, facts.b != null)", v)[0] for v in variables]
    assert written[1] - written[0] > 90 * 1_000 * 8  # as written: a copy of b (~10,000 weight) per iteration
    assert costs[1] - costs[0] < 90 * 100  # rewritten: binding x and a few steps per iteration, no copy of b
    costs = [BENCH.measure("args.a.all(x, [facts.b][0].size() > 0)", v)[0] for v in variables]
    assert costs[1] > 8 * costs[0] > 8 * 1_000 * 10


def test_a_check_is_handed_only_the_facts_it_reads() -> None:
    """facts.small beside a 4 MB fact neither converts nor charges the big one."""
    big = [{"k": str(i), "v": i} for i in range(100_000)]
    activation = Activation({"args": {}, "facts": {"small": 1, "big": big}, "principal": None})
    program = compile_check("facts.small == 1 && principal == null")
    started = time.perf_counter()
    assert program.holds(activation) is True
    assert time.perf_counter() - started < 0.05
    assert activation.spent < 1_000


# --- shipped checks on a request at the body limit -------------------------------------------------

_FIELD = re.compile(r"\.\s*([A-Za-z_]\w*)\b(?!\s*\()")


def _hostile(program: CheckProgram, nodes: int) -> dict[str, Any]:
    """Values for every key the check reads: nested lists of maps carrying every field name the check uses."""
    fields = sorted(set(_FIELD.findall(program.source)) - {"args", "facts"}) or ["x"]

    def value(depth: int, width: int) -> Any:
        if depth == 0:
            return "HAT001"
        return [{f: value(depth - 1, width) for f in fields} for _ in range(width)]

    width = max(1, round(nodes ** (1 / 3) / len(fields)))  # (width x fields)^3 nodes
    big = value(3, width)
    return {
        "args": {f: big for f in fields},
        "facts": {name: big for name in program.fact_names() | set(fields)},
        "principal": "u1",
        "now": BENCH_NOW,
    }


BENCH_NOW = __import__("datetime").datetime(2024, 5, 15, 15, 0, tzinfo=__import__("datetime").timezone.utc)


def _shipped_checks() -> list[tuple[str, str]]:
    checks = []
    for domain in ("airline", "retail"):
        checklist = load_checklist(ROOT / "checklists" / f"{domain}.yaml")
        for tool, spec in checklist.tools.items():
            for requirement in spec.requirements:
                if requirement.check:
                    checks.append((f"{domain}/{tool}/{requirement.id}", requirement.check))
    return sorted(set(checks))


def test_every_shipped_check_on_a_body_limit_request_runs_in_process_briefly_or_is_not_run_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every check of airline and retail over ~100,000-node values: in-process <= 50 ms (x4 margin), or sent apart."""

    def apart(self: Activation, source: str, roots: Any = None) -> Any:
        raise CelEvalError("sent apart")

    monkeypatch.setattr(Activation, "isolated", apart)
    slow = []
    for name, source in _shipped_checks():
        program = compile_check(source)
        if program._path is not None:
            continue
        activation = Activation(_hostile(program, 100_000))
        started = time.perf_counter()
        try:
            program.evaluate(activation)
        except CelEvalError:
            pass
        elapsed = time.perf_counter() - started
        if activation.spent > 0 and elapsed > 0.2:  # charged, so evaluated in this process
            slow.append((name, round(elapsed, 3), activation.spent))
    assert not slow, slow


def _leg(number: str, date: str, origin: str, destination: str) -> dict[str, Any]:
    """A flight as tau2's search tools return it."""
    return {
        "flight_number": number,
        "origin": origin,
        "destination": destination,
        "status": "available",
        "scheduled_departure_time_est": "06:00:00",
        "scheduled_arrival_time_est": "09:00:00",
        "date": date,
        "available_seats": {"basic_economy": 9, "economy": 12, "business": 5},
        "prices": {"basic_economy": 80, "economy": 150, "business": 400},
    }


def test_a_booking_after_searching_seven_dates_is_still_allowed() -> None:
    """Honest work is not refused: one-stop searches of 7 dates (tau2's largest results), then a booking."""
    dates = [f"2024-05-{day}" for day in range(20, 27)]
    onestop = [
        [[_leg(f"HAT{d}{k:02d}", date, "JFK", "ORD"), _leg(f"HAT{d}{k:02d}B", date, "ORD", "SFO")] for k in range(40)]
        for d, date in enumerate(dates)
    ]
    direct = [
        {"args": {"date": date}, "error": False, "result": [_leg(f"HAD{k}", date, "JFK", "SFO") for k in range(20)]}
        for date in dates
    ]
    checklist = load_checklist(ROOT / "checklists" / "airline.yaml")
    checks = {r.id: r.check for r in checklist.tools["book_reservation"].requirements if r.check}
    args = {
        "flights": [
            {"flight_number": "HAT639", "date": "2024-05-26"},
            {"flight_number": "HAT639B", "date": "2024-05-26"},
        ]
    }
    activation = Activation(
        {
            "args": args,
            "facts": {"direct_search_calls": direct, "onestop_searches": onestop},
            "principal": "u1",
            "now": BENCH_NOW,
        }
    )
    assert compile_check(checks["book-flights-searched"]).holds(activation) is True


def test_a_bare_name_in_a_comprehension_is_a_reference_not_a_copy() -> None:
    """A loop's own large item, or facts.s read beside a large fact: charged a step per read, not their weight.

    Measured with the engine: it copies what a select or an index reads (``facts.big``, ``c.result``), never
    the variable it names, so reading a bare name costs the same however large the value behind it is.
    """
    big = [{"k": str(i)} for i in range(20_000)]
    loop = "facts.one.all(b, args.a.all(x, b.k0 == '0'))"  # len(args.a) reads of a 20,000-entry b
    b = {f"k{i}": str(i) for i in range(20_000)}
    once, often = (BENCH.measure(loop, {"args": {"a": [1] * n}, "facts": {"one": [b]}}) for n in (1, 200))
    assert once[1] is not None and often[1] is not None
    assert often[1] < 2 * once[1] + SLACK_S  # 200 copies of b would take ~200 x 3 ms
    assert often[0] - once[0] < 199 * 20  # and the estimate grows by a few steps per read, not b's weight
    small = BENCH.measure("args.a.all(x, facts.s == 1)", {"args": {"a": [1] * 50}, "facts": {"s": 1}})
    beside = BENCH.measure("args.a.all(x, facts.s == 1)", {"args": {"a": [1] * 50}, "facts": {"s": 1, "big": big}})
    assert small[0] == beside[0] < 1_000  # the view has only facts.s, and the name facts costs a step
    copied = BENCH.measure("args.a.all(x, facts.big.size() > 0)", {"args": {"a": [1] * 50}, "facts": {"big": big}})
    assert copied[0] > 50 * 20_000  # a select copies, so it is charged per read
