"""The gate decides the replays' real calls exactly as it did when they were recorded.

``data/{airline,retail}_replay_decisions.json.gz`` hold every (call, trajectory,
now, principal) the hard gate judged during ``bench replay --domain airline``
(397) and ``--domain retail`` (406), and the whole Decision it returned (outcome,
stage, message, requirement statuses and evidence, error, hash). Speed-ups of
the gate must leave every one identical. Recorded by ``python
benchmarks/gate_decisions.py capture [--domain retail --out ...]`` from the code
before the gate was optimised.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from policyguard.gate.hardgate import HardGate

ROOT = Path(__file__).resolve().parents[2]


def _capture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_decisions", ROOT / "benchmarks" / "gate_decisions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["airline", "retail"])
def recorded(request: pytest.FixtureRequest) -> tuple[HardGate, list]:  # type: ignore[type-arg]
    module = _capture_module()
    checklist, cases = module.load_cases(Path(__file__).parent / "data" / f"{request.param}_replay_decisions.json.gz")
    return HardGate(checklist), [(*case, module.decision_record) for case in cases]


def test_the_fixture_covers_allows_blocks_and_gate_errors_alike(recorded: tuple[HardGate, list]) -> None:  # type: ignore[type-arg]
    """The recording is the real mix, not only easy cases: escalations, blocks on checks and on missing facts."""
    _, cases = recorded
    outcomes = {expected["outcome"] for _, _, _, expected, _ in cases}
    assert len(cases) >= 237
    assert {"escalate", "block"} <= outcomes
    evidence = [r["evidence"] for *_, expected, _ in cases for r in expected["requirements"]]
    assert any(e.startswith("check is false") for e in evidence)
    assert any(e.startswith("missing fact") for e in evidence)


def test_every_replay_decision_is_identical_to_the_recorded_one(recorded: tuple[HardGate, list]) -> None:  # type: ignore[type-arg]
    """Outcome, stage, message, every requirement's status and evidence, error and hash: all equal."""
    gate, cases = recorded
    for number, (call, trajectory, context, expected, record) in enumerate(cases):
        assert record(gate.check(call, trajectory, context)) == expected, f"case {number}: {call.name} {call.id}"


def test_deciding_twice_gives_the_same_decision(recorded: tuple[HardGate, list]) -> None:  # type: ignore[type-arg]
    """Anything the gate caches between decisions must not change the second answer (or the first)."""
    gate, cases = recorded
    for call, trajectory, context, expected, record in cases[::7]:
        assert record(gate.check(call, trajectory, context)) == expected
        assert record(gate.check(call, trajectory, context)) == expected
