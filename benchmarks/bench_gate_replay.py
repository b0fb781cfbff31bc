"""The hard gate on its real workload: the airline replay's decisions, against the CEL floor.

Run: ``python benchmarks/bench_gate_replay.py [--repeat 5]``. Prints, as medians
over ``--repeat`` passes (each pass decides every recorded case once, in order):

(a) ``HardGate.check`` per decision (target <= 100 us);
(b) the same CEL programs evaluated on activations built before timing - the
    floor no gate can beat while it runs those programs;
(c) their ratio (target <= 4x), taken within one process: the machine is shared
    and noisy, so absolute figures move between runs more than the ratio does.

The cases are ``tests/gate/data/airline_replay_decisions.json.gz``
(``benchmarks/gate_decisions.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from policyguard.gate.cel import Activation, CelEvalError, CheckProgram
from policyguard.gate.facts import resolve_facts, resolve_principal
from policyguard.gate.hardgate import HardGate
from policyguard.trajectory.messages import ToolResultsView


def _cases_module() -> Any:
    path = Path(__file__).resolve().parent / "gate_decisions.py"
    spec = importlib.util.spec_from_file_location("gate_decisions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _floor_inputs(gate: HardGate, cases: list[Any]) -> list[list[tuple[CheckProgram, Activation]]]:
    """Per case: the programs the gate would evaluate, each with its activation already converted."""
    out = []
    for call, trajectory, context, _ in cases:
        checklist = gate.checklist
        if not checklist.is_mutating(call.name):
            out.append([])
            continue
        view = ToolResultsView(trajectory)
        principal = resolve_principal(checklist, view, context.principal)
        programs = [gate._programs[r.id] for r in checklist.requirements_for(call.name) if r.check is not None]
        needed = set().union(*(p.fact_names() for p in programs)) if programs else set()
        facts = resolve_facts(checklist, call, view, needed, principal=principal)
        variables = {"args": call.arguments, "facts": facts.values, "principal": principal, "now": context.now}
        activation = Activation(variables)
        activation.context()  # convert now, outside the timing
        runnable = [p for p in programs if p.fact_names() <= set(facts.values)]
        out.append([(p, activation) for p in runnable])
    return out


def _time_gate(gate: HardGate, cases: list[Any]) -> list[float]:
    """Seconds per case, one pass."""
    clock = time.perf_counter
    times = []
    for call, trajectory, context, _ in cases:
        started = clock()
        gate.check(call, trajectory, context)
        times.append(clock() - started)
    return times


def _time_floor(inputs: list[list[tuple[CheckProgram, Activation]]]) -> list[float]:
    clock = time.perf_counter
    times = []
    for programs in inputs:
        started = clock()
        for program, activation in programs:
            try:
                program.holds(activation)
            except CelEvalError:
                pass
        times.append(clock() - started)
    return times


def _summary(passes: list[list[float]]) -> tuple[float, float]:
    """(median decision, mean decision) in us: each case's median over the passes, then over the cases."""
    per_case = [statistics.median(column) for column in zip(*passes, strict=True)]
    return statistics.median(per_case) * 1e6, statistics.fmean(per_case) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="passes over all cases (at least 3; default 5)")
    args = parser.parse_args()
    checklist, cases = _cases_module().load_cases()
    gate = HardGate(checklist)
    inputs = _floor_inputs(gate, cases)
    _time_gate(gate, cases)  # warm-up: imports, first compilations, parsed results
    _time_floor(inputs)
    gate_passes, floor_passes = [], []
    for _ in range(max(3, args.repeat)):
        gate_passes.append(_time_gate(gate, cases))
        floor_passes.append(_time_floor(inputs))
    gate_median, gate_mean = _summary(gate_passes)
    floor_median, floor_mean = _summary(floor_passes)
    programs = sum(len(p) for p in inputs)
    print(f"decisions: {len(cases)} (airline replay), CEL programs evaluated: {programs}, passes: {len(gate_passes)}")
    print("                                              median     mean   (per decision)")
    print(
        f"(a) HardGate.check                          {gate_median:7.1f}  {gate_mean:7.1f} us  (target: median <= 100)"
    )
    print(f"(b) same CEL programs, prebuilt activations {floor_median:7.1f}  {floor_mean:7.1f} us")
    print(
        f"(c) ratio (a) / (b)                         {gate_median / floor_median:7.2f}  "
        f"{gate_mean / floor_mean:7.2f} x   (target <= 4)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
