"""The fault-injection harness: gated executor never violates INV-1, ungated does,
and the checker finds exactly what the harness injected."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from policyguard.audit.inv1 import audit_file
from policyguard.bench.harness import SCENARIOS, GatedExecutor, ScenarioResult, Verdict, run_matrix, run_scenario
from policyguard.cli import main

CALLS = 120


@pytest.fixture(scope="module")
def matrix() -> dict[tuple[str, str], ScenarioResult]:
    return {(r.executor, r.scenario): r for r in run_matrix(calls=CALLS, seed=11)}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("executor", ["gated", "grants"])
def test_gated_executors_have_zero_violations(
    matrix: dict[tuple[str, str], ScenarioResult], executor: str, scenario: str
) -> None:
    result = matrix[(executor, scenario)]
    assert result.executes > 0
    assert result.violations == 0 and result.expected_violations == 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ungated_executor_violates_in_every_scenario(
    matrix: dict[tuple[str, str], ScenarioResult], scenario: str
) -> None:
    result = matrix[("ungated", scenario)]
    assert result.violations > 0
    assert result.executes >= result.calls  # it runs everything it is handed


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("executor", ["gated", "grants", "ungated"])
def test_checker_finds_exactly_the_injected_violations(
    matrix: dict[tuple[str, str], ScenarioResult], executor: str, scenario: str
) -> None:
    result = matrix[(executor, scenario)]
    assert result.by_kind == result.expected_by_kind
    assert result.violations == result.expected_violations


def test_fault_scenarios_show_their_own_violation_kind(matrix: dict[tuple[str, str], ScenarioResult]) -> None:
    own = {
        "verdict_reorder": "no_allow",
        "duplicate_verdict": "duplicate_effect",
        "arg_mutation_after_allow": "args_changed",
        "revocation": "revoked",
        "expiry": "expired",
        "nonce_replay": "replay",
    }
    for scenario, kind in own.items():
        assert matrix[("ungated", scenario)].by_kind[kind] > 0, scenario
    assert set(k for k, n in matrix[("ungated", "no_faults")].by_kind.items() if n) == {"denied"}


def test_same_seed_same_result_other_seed_other_result() -> None:
    a = run_scenario("ungated", "expiry", calls=60, seed=3)
    b = run_scenario("ungated", "expiry", calls=60, seed=3)
    c = run_scenario("ungated", "expiry", calls=60, seed=4)
    assert a == b
    assert (a.violations, a.faults_injected) != (c.violations, c.faults_injected)


def test_written_traces_audit_to_the_same_counts(tmp_path: Path) -> None:
    result = run_scenario("ungated", "nonce_replay", calls=50, seed=5, trace_dir=tmp_path)
    assert result.trace_path is not None
    report = audit_file(result.trace_path)
    assert len(report.violations) == result.expected_violations
    assert report.executes == result.executes


def test_gated_executor_refuses_by_default_and_deny_wins() -> None:
    gate = GatedExecutor()
    args = {"path": "/a"}
    assert not gate.try_execute("c1", "t", args, now=0.0)
    gate.record_verdict(Verdict("deny", "c1", "t", args, "v1", 100.0, "n1"))
    gate.record_verdict(Verdict("allow", "c1", "t", args, "v1", 100.0, "n1"))
    assert not gate.try_execute("c1", "t", args, now=0.0)
    gate.record_verdict(Verdict("allow", "c2", "t", args, "v1", 100.0, "n2"))
    assert not gate.try_execute("c2", "t", {"path": "/b"}, now=0.0)
    assert not gate.try_execute("c2", "other_tool", args, now=0.0)
    assert not gate.try_execute("c2", "t", args, now=100.5)
    assert gate.try_execute("c2", "t", args, now=1.0)
    assert not gate.try_execute("c2", "t", args, now=2.0)  # nonce used
    gate.record_verdict(Verdict("allow", "c3", "t", args, "v1", 100.0, "n3"))
    gate.revoke("v2")
    assert not gate.try_execute("c3", "t", args, now=1.0)


def test_gated_and_grant_executors_run_exactly_the_same_calls(matrix: dict[tuple[str, str], ScenarioResult]) -> None:
    for scenario in SCENARIOS:
        gated, grants = matrix[("gated", scenario)], matrix[("grants", scenario)]
        assert (gated.events, gated.executes) == (grants.events, grants.executes), scenario


def test_cli_json_and_exit_code(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "inv1", "--calls", "40", "--seed", "2", "--json", "--trace-dir", str(tmp_path)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["gated_violations"] == 0 and payload["grants_violations"] == 0
    assert payload["ungated_violations"] > 0
    assert payload["checker_agrees_with_ground_truth"] is True
    assert len(payload["scenarios"]) == 3 * len(SCENARIOS)
    assert len(list(tmp_path.glob("*.jsonl"))) == 3 * len(SCENARIOS)


def test_grant_executor_checks_a_signed_call_bound_grant() -> None:
    from policyguard.bench.harness import GrantExecutor, _Minter

    now = [1000.0]
    minter = _Minter(lambda: now[0])
    gate = GrantExecutor(minter.public_pem, "v1", lambda: now[0])
    args = {"path": "/a"}
    allow = Verdict("allow", "c1", "t", args, "v1", 1030.0, "n1")
    assert not gate.try_execute("c1", "t", args, now=now[0])  # no verdict yet
    gate.record_verdict(Verdict("allow", "c1", "t", args, "v1", 1030.0, "n1"))  # an allow nobody signed
    assert not gate.try_execute("c1", "t", args, now=now[0])
    gate.record_verdict(replace(allow, grant=minter.sign(allow)))
    assert not gate.try_execute("c1", "t", {"path": "/b"}, now=now[0])
    assert gate.try_execute("c1", "t", args, now=now[0])
    assert not gate.try_execute("c1", "t", args, now=now[0])  # nonce spent
    other = Verdict("allow", "c2", "t", args, "v1", 1030.0, "n2")
    gate.record_verdict(replace(other, grant=minter.sign(other)))
    gate.record_verdict(Verdict("deny", "c2", "t", args, "v1", 1030.0, "n2"))
    assert not gate.try_execute("c2", "t", args, now=now[0])  # deny wins
