"""Measured CEL time against the cost estimate: the worst expression shapes the validator accepts.

Run: ``python benchmarks/bench_cel_cost.py [--json]`` (no network, no model).

For each expression shape of :data:`SHAPES` (copies of big values inside
comprehensions, ``map``/``filter`` accumulators, deep ``==``, ``in`` over a
list, string scans) and each size of :data:`SIZES`, it times one in-process
evaluation (the engine's context built for the check included, as the gate
does) and prints the estimate, the time, and the time per estimated step.
Each shape runs twice: as the gate runs it, with its ``args``/``facts`` paths
as variables (``policyguard/gate/celhoist.py``; charged by the rewritten
check's estimate), and as written (how a check that reads a whole map runs,
and the fallback when the rewritten one fails).
``tests/gate/test_cel_cost_model.py`` asserts the same pairs stay within
:data:`FACTOR` x :data:`STEP_US` per step; this prints the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from policyguard.gate.cel import Activation, CelEvalError, CheckProgram, compile_check
from policyguard.gate.celcost import CONVERT_STEPS, STEP_SECONDS, estimate

STEP_US = STEP_SECONDS * 1e6  # the step the budget is sized with: DECISION_BUDGET x STEP_US = 50 ms
FACTOR = 4  # measured time stays under FACTOR x STEP_US x the estimate

SHAPES: tuple[str, ...] = (
    "args.a.all(x, facts.b.exists(y, y.k == x.k))",
    "args.a.all(x, facts.b.size() > 0)",
    "args.a.all(x, !(x.k in facts.c))",
    "args.a.all(x, has(facts.o.b))",
    "args.a.all(x, facts.b == facts.o.b)",
    "args.a.all(x, facts.b[0] != x)",
    "args.a.map(x, facts.b).size() > 0",
    "facts.b.filter(x, true).size() >= 0",
    "args.a.exists(x, args.a.filter(y, y.k == x.k).size() > 1)",
    "args.a.all(x, x.s.contains('q'))",
    "[facts.b, facts.o.b].all(l, l.all(y, y.v >= 0))",
    "facts.b.map(x, x.k).exists(k, k == 'zz')",
    "(args.a + facts.b).size() > 0",
    "args.a.all(x, facts.c.exists(c, c == x.k) || size(facts.b) > 0)",
    "facts.b.all(x, x.v >= 0) && facts.o.b.all(x, x.k != '')",
    "[0, 1, 2, 3, 4, 5, 6, 7].filter(i, i < args.a.size()).all(i, facts.b.exists(y, y.k != args.a[i].k))",
    "args.a.all(x, [facts.o][0].b.size() > 0)",  # copies that survive the rewrite: an index, then a field
    "args.a.all(x, !has(x.k.z) || x.v.w > 0)",  # fields of a string and of a number: an error at once, a step
    'args.a.all(x, {"k": facts.b}["k"].exists(y, y.k == x.k))',  # a value read from a map literal: its items walked
)
SIZES: tuple[tuple[int, int], ...] = ((10, 10), (50, 200), (200, 50), (100, 1000), (1000, 100), (20, 5000))


def variables(n: int, m: int, text: int = 40) -> dict[str, Any]:
    """``args.a``: n maps; ``facts.b``: m maps; ``facts.c``: m strings; ``facts.o.b``: a copy of ``facts.b``."""
    a = [{"k": f"a{i}", "v": i, "s": "x" * text} for i in range(n)]
    b = [{"k": f"b{i}", "v": i, "s": "y" * text} for i in range(m)]
    return {"args": {"a": a}, "facts": {"b": b, "c": [f"c{i}" for i in range(m)], "o": {"b": [dict(x) for x in b]}}}


MEASURE_CAP = 4_000_000  # steps: larger pairs are not timed (the gate would not run them in-process)


def charged(program: CheckProgram, activation: Activation) -> int:
    """The steps the gate charges ``program`` on a fresh decision: converting what it reads, and its estimate."""
    hoisted = program._hoisted
    if hoisted is not None:
        view = activation._hoisted_set(hoisted.hoists)
        tree = hoisted.tree
    else:
        assert program._cost is not None
        view = activation.view(program._roots)
        tree = program._cost[0]
    return CONVERT_STEPS * view.weight() + estimate(tree, view.summary())


def measure(source: str, values: dict[str, Any], *, rewritten: bool = True) -> tuple[int, float | None]:
    """(charged steps, seconds) of one in-process evaluation over a fresh activation, conversion included.

    ``rewritten=False`` runs the check as written. When the rewritten check fails and the check as written
    runs after it, the steps are both charges. The seconds are None when the charge is over :data:`MEASURE_CAP`.
    """
    program = compile_check(source)
    as_written = dataclasses.replace(program, _rewrite=None)
    if not rewritten:
        program = as_written
    activation = Activation(values, budget=10**15)
    steps = charged(program, activation)
    if steps > MEASURE_CAP:
        return steps, None
    started = time.perf_counter()
    try:
        program.evaluate(activation)
    except CelEvalError:  # an error is an outcome too (facts.b[0] on an empty b): its time counts the same
        pass
    seconds = time.perf_counter() - started
    if program._hoisted is not None and any(view.context is not None for view in activation._views.values()):
        steps += charged(as_written, Activation(values))  # the rewritten check failed: both ran
    return steps, seconds


def run() -> list[dict[str, Any]]:
    rows = []
    for source in SHAPES:
        for n, m in SIZES:
            for rewritten in (True, False):
                steps, seconds = measure(source, variables(n, m), rewritten=rewritten)
                if seconds is None:
                    continue
                rows.append(
                    {
                        "check": source if rewritten else f"{source} (as written)",
                        "n": n,
                        "m": m,
                        "steps": steps,
                        "ms": seconds * 1e3,
                        "us_per_step": seconds * 1e6 / steps,
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    rows = run()
    if parser.parse_args().json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"{row['us_per_step']:7.3f} us/step {row['ms']:9.2f} ms {row['steps']:>12,} steps"
            f"  n={row['n']:<5} m={row['m']:<5} {row['check']}"
        )
    worst = max(rows, key=lambda r: r["us_per_step"])
    print(f"worst: {worst['us_per_step']:.3f} us per estimated step ({worst['check']}, n={worst['n']}, m={worst['m']})")


if __name__ == "__main__":
    main()
