"""The hard gate on its real workload: the airline or retail replay's decisions, against the CEL floor.

Run: ``python benchmarks/bench_gate_replay.py [--domain airline|retail] [--repeat 5]``. Prints, over
``--repeat`` passes (each pass decides every recorded case once, in order; a case's figure is its
median over the passes):

(a) ``HardGate.check`` per decision, median and p99 (target: median <= 150 us, p99 <= 1 ms);
(b) the same CEL programs run by the engine alone on contexts converted before timing - no fact
    finding, no cost estimate, no worker process: the floor no gate can beat while it runs them.
    They run as the gate runs them, rewritten to read their ``args``/``facts`` paths as variables
    (``policyguard/gate/celhoist.py``), each value cut to what the checks read
    (``policyguard/gate/celproject.py``); (b0) is the same floor for the checks as written, over
    whole values;
(c) their ratio, taken within one process: the machine is shared and noisy, so absolute figures
    move between runs more than the ratio does;

and how many checks a pass sends to the worker process (over the in-process budget; ~1 ms a trip).

With ``--without-estimate`` it also times (a') the gate with every check admitted without its cost
estimate, in the same passes: what a CEL engine that enforced a step limit itself would spare (``cel``
0.10 cannot be stopped once it runs, so the gate bounds each check's work before it runs,
``policyguard/gate/celcost.py``). The few checks a pass sends to the worker process then run in this
process too. It is a measurement only, made by replacing the admission in this process; the package has
no such mode, and a check admitted this way is unbounded.

The cases are ``tests/gate/data/{airline,retail}_replay_decisions.json.gz``
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

from policyguard.gate.cel import WHOLE, Activation, CelEvalError, CheckProgram, _covers, union_hoists
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


Floor = list[list[tuple[CheckProgram, Activation, Any]]]


def _floor_inputs(gate: HardGate, cases: list[Any], *, rewritten: bool = True) -> Floor:
    """Per case: the programs the gate would evaluate, each with its context already converted.

    Rewritten checks share one context of all their paths, as in the gate. Built afresh for every pass.
    """
    out: Floor = []
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
        runnable = [p for p in programs if p.fact_names() <= set(facts.values)]
        shared = union_hoists(runnable) if rewritten else None
        activation = Activation(variables, hoists=shared)
        items = []
        for program in runnable:  # convert now, outside the timing
            hoisted = program._hoisted if rewritten and program._path is None else None
            if hoisted is None:
                items.append((program, activation, activation.context(program._roots)))
            else:
                assert shared is not None
                activation._hoisted_contexts[hoisted.hoists] = activation._hoisted_set(shared)
                items.append((program, activation, (hoisted.program, activation.hoisted_context(hoisted.hoists))))
        out.append(items)
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


def _sent_apart(gate: HardGate, cases: list[Any]) -> int:
    """How many checks one pass sends to the worker process (an untimed pass, counting Activation.isolated)."""
    count = 0
    isolated = Activation.isolated

    def counted(self: Activation, *args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return isolated(self, *args, **kwargs)

    Activation.isolated = counted  # type: ignore[method-assign]
    try:
        _time_gate(gate, cases)
    finally:
        Activation.isolated = isolated  # type: ignore[method-assign]
    return count


class _Unbounded:
    """``Activation.charge`` and ``settle`` replaced by an admission with no estimate and no budget, for (a')."""

    def __enter__(self) -> None:
        self.saved = (Activation.charge, Activation.settle)

        def admit(
            self: Activation, tree: Any, bound: Any, source: str, roots: Any = WHOLE, hoists: Any = None
        ) -> bool:
            # the decision's shared context whenever it covers the check: with no budget, its conversion never
            # has to fit half of what is left, the one condition of the gate's choice dropped here
            if hoists is None:
                wide = self._wide
                if wide is None or not _covers(wide, roots):
                    wide = roots
                self._contexts[roots] = self.view(wide)
            else:
                every = self._hoists
                if every is None or not all(item.name in self._joined for item in hoists):
                    every = hoists
                self._hoisted_contexts[hoists] = self._hoisted_set(every)
            return True

        Activation.charge = admit  # type: ignore[method-assign,assignment]
        Activation.settle = lambda self, seconds: None  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        Activation.charge, Activation.settle = self.saved  # type: ignore[method-assign]


def _time_floor(inputs: Floor) -> list[float]:
    clock = time.perf_counter
    times = []
    for programs in inputs:
        started = clock()
        for program, activation, context in programs:
            try:  # the engine alone: no estimate, never the worker process
                if program._path is not None:
                    program._walk(activation.variables)
                elif isinstance(context, tuple):
                    context[0].execute(context[1])
                else:
                    program._program.execute(context)
            except (CelEvalError, KeyError, TypeError, ValueError, RuntimeError, ArithmeticError, IndexError):
                pass
        times.append(clock() - started)
    return times


def _summary(passes: list[list[float]]) -> tuple[float, float, float]:
    """(median, p99, mean) per decision in us: each case's median over the passes, then over the cases."""
    per_case = sorted(statistics.median(column) for column in zip(*passes, strict=True))
    p99 = per_case[min(len(per_case) - 1, round(0.99 * (len(per_case) - 1)))]
    return statistics.median(per_case) * 1e6, p99 * 1e6, statistics.fmean(per_case) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=("airline", "retail"), default="airline")
    parser.add_argument("--repeat", type=int, default=5, help="passes over all cases (at least 3; default 5)")
    parser.add_argument(
        "--without-estimate",
        action="store_true",
        help="also time the gate with checks admitted without their cost estimate (a measurement, not a mode)",
    )
    args = parser.parse_args()
    module = _cases_module()
    checklist, cases = module.load_cases(module.FIXTURE.with_name(f"{args.domain}_replay_decisions.json.gz"))
    gate = HardGate(checklist)
    _time_gate(gate, cases)  # warm-up: imports, first compilations, parsed results
    _time_floor(_floor_inputs(gate, cases))
    gate_passes, floor_passes, written_passes, unbounded_passes = [], [], [], []
    for _ in range(max(3, args.repeat)):
        gate_passes.append(_time_gate(gate, cases))
        if args.without_estimate:
            with _Unbounded():
                unbounded_passes.append(_time_gate(gate, cases))
        inputs = _floor_inputs(gate, cases)
        floor_passes.append(_time_floor(inputs))
        written_passes.append(_time_floor(_floor_inputs(gate, cases, rewritten=False)))
    gate_median, gate_p99, gate_mean = _summary(gate_passes)
    floor_median, floor_p99, floor_mean = _summary(floor_passes)
    written_median, written_p99, written_mean = _summary(written_passes)
    programs = sum(len(p) for p in inputs)
    apart = _sent_apart(gate, cases)
    print(f"decisions: {len(cases)} ({args.domain} replay), CEL programs: {programs}, passes: {len(gate_passes)}")
    print(f"checks sent to the worker process per pass: {apart}")
    print("                                          median      p99     mean   (us per decision)")
    print(f"(a) HardGate.check                       {gate_median:7.1f}  {gate_p99:7.1f}  {gate_mean:7.1f}")
    if unbounded_passes:
        unbounded_median, unbounded_p99, unbounded_mean = _summary(unbounded_passes)
        print(
            f"(a') the same, no cost estimate          {unbounded_median:7.1f}  {unbounded_p99:7.1f}  "
            f"{unbounded_mean:7.1f}   (a measurement: unbounded, not a mode)"
        )
    print(f"(b) the engine alone, converted contexts {floor_median:7.1f}  {floor_p99:7.1f}  {floor_mean:7.1f}")
    print(f"(b0) the same, the checks as written     {written_median:7.1f}  {written_p99:7.1f}  {written_mean:7.1f}")
    print(
        f"(c) ratio (a) / (b)                       {gate_median / floor_median:7.2f}  "
        f"{gate_p99 / floor_p99:7.2f}  {gate_mean / floor_mean:7.2f} x"
    )
    print("targets: (a) median <= 150 us, p99 <= 1,000 us")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
