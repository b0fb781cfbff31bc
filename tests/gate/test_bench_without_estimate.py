"""``bench_gate_replay.py --without-estimate`` measures the gate's own work, and only inside its block.

The figure says what an engine that bounded its own work would spare, so the gate timed that way must
decide every case as the gate does (the same work, minus the estimate), and the admission must be the
package's again once the block ends, also when it ends by an exception.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from policyguard.gate import celcost
from policyguard.gate.cel import Activation, CelBudgetError, compile_check
from policyguard.gate.hardgate import HardGate

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gate_replay", ROOT / "benchmarks" / "bench_gate_replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_the_gate_without_the_estimate_decides_every_replay_case_alike(domain: str) -> None:
    bench = _bench()
    cases_module = bench._cases_module()  # the benchmark's own loader of the recorded cases
    checklist, cases = cases_module.load_cases(Path(__file__).parent / "data" / f"{domain}_replay_decisions.json.gz")
    gate = HardGate(checklist)
    cases = cases[::4]  # a quarter of each replay, every tool among them
    bounded = [gate.check(call, trajectory, context) for call, trajectory, context, _ in cases]
    with bench._Unbounded():
        unbounded = [gate.check(call, trajectory, context) for call, trajectory, context, _ in cases]
    assert len({call.name for call, *_ in cases}) >= 4
    for one, other in zip(bounded, unbounded, strict=True):
        assert one.model_dump(exclude={"latency_ms"}) == other.model_dump(exclude={"latency_ms"})


def test_the_admission_is_the_packages_again_after_the_block_even_on_an_error() -> None:
    bench = _bench()
    charge, settle = Activation.charge, Activation.settle
    with pytest.raises(RuntimeError), bench._Unbounded():
        assert Activation.charge is not charge
        raise RuntimeError("stop")
    assert (Activation.charge, Activation.settle) == (charge, settle)
    costly = compile_check("args.l.all(a, args.l.all(b, args.l.all(c, a + b + c >= 0)))")
    with pytest.raises(CelBudgetError):  # the package's admission refuses it at once again
        costly.holds(Activation({"args": {"l": list(range(2_000))}}, budget=celcost.DECISION_BUDGET))
