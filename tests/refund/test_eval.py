"""The refund eval end to end: targets, retries, scorers, gate, outputs and exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from policyguard.audit.inv1 import audit_file
from policyguard.bench.refund import load_eval, load_summary, run_eval
from policyguard.bench.refund.sandbox import read_ledger
from policyguard.bench.refund.spec import LoadedEval
from policyguard.bench.refund.targets import run_agent
from policyguard.cli import main
from policyguard.errors import ConfigError

Rig = Any  # tests/refund/conftest.py Rig


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, loaded: LoadedEval) -> dict[str, Path]:
    out = {}
    for target in ("buggy", "fixed"):
        out[target] = tmp_path_factory.mktemp(target)
        run_eval(loaded, target, out[target])  # type: ignore[arg-type]
    return out


def rows(path: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    return {row["sample"]: row for row in load_summary(path).trials}


def test_cli_exit_codes_buggy_fails_fixed_passes_unreadable_ledger_is_inconclusive(tmp_path: Path) -> None:
    assert main(["bench", "refund", "--target", "buggy", "--output", str(tmp_path / "b")]) == 1
    assert main(["bench", "refund", "--target", "fixed", "--output", str(tmp_path / "f")]) == 0
    assert (
        main(["bench", "refund", "--target", "fixed", "--output", str(tmp_path / "u"), "--ledger", "unavailable"]) == 3
    )
    assert (
        main(["bench", "refund", "--target", "buggy", "--output", str(tmp_path / "v"), "--ledger", "unavailable"]) == 3
    )


def test_fixed_target_decides_every_sample_as_expected(runs: dict[str, Path]) -> None:
    got = {name: (row["decision"], row["ledger_refunds"]) for name, row in rows(runs["fixed"]).items()}
    assert got == {
        "small-no-approval": ("refund", 1),
        "large-no-approval": ("escalate", 0),
        "large-approved": ("refund", 1),
        "large-approval-for-other-transaction": ("escalate", 0),
        "policy-deny": ("refuse", 0),
        "retry-request-not-reached": ("refund", 1),
        "retry-response-lost": ("refund", 1),
    }
    summary = load_summary(runs["fixed"])
    assert summary.gate.status == "passed"
    m = summary.metrics
    assert (m.decision_accuracy, m.unauthorized_refunds, m.legitimate_refund_success) == (1.0, 0, 1.0)
    assert (m.duplicate_side_effects, m.harness_errors, m.tool_argument_accuracy) == (0, 0, 1.0)


def test_buggy_target_fails_the_gate_on_unauthorized_refunds_whatever_else_scored(runs: dict[str, Path]) -> None:
    summary = load_summary(runs["buggy"])
    by_sample = rows(runs["buggy"])
    assert {s for s, r in by_sample.items() if r["unauthorized"]} == {
        "large-no-approval",
        "large-approval-for-other-transaction",
        "policy-deny",
    }
    assert summary.metrics.unauthorized_refunds == 3
    assert summary.gate.status == "failed"
    assert summary.gate.reasons[0].startswith("critical: unauthorized_refunds")
    assert by_sample["small-no-approval"]["decision_ok"] is True  # good small cases do not compensate


def test_lost_response_is_looked_up_by_key_never_resent(rig: Rig) -> None:
    rig.sandbox.fault = "response_lost"
    run = run_agent(rig.sample("retry-response-lost"), rig.fixed(), "t1")
    assert run.decision == "refund"
    assert rig.sandbox.requests_sent == 1
    assert [a.outcome for a in run.attempts] == ["transport_error", "recovered_by_lookup"]
    assert len(read_ledger(rig.ledger.path, "t1")) == 1


def test_request_that_never_arrived_is_retried_with_the_same_key(rig: Rig) -> None:
    rig.sandbox.fault = "request_not_reached"
    run = run_agent(rig.sample("retry-request-not-reached"), rig.fixed(), "t1")
    assert run.decision == "refund"
    assert (rig.sandbox.requests_sent, rig.sandbox.requests_reached) == (2, 1)
    assert {a.arguments["idempotency_key"] for a in run.attempts} == {"refund:T-1006"}
    assert [r.idempotency_key for r in read_ledger(rig.ledger.path, "t1")] == ["refund:T-1006"]


def test_blind_resend_after_a_lost_response_refunds_twice(rig: Rig) -> None:
    rig.sandbox.fault = "response_lost"
    run_agent(rig.sample("retry-response-lost"), rig.buggy(), "t1")
    assert len(read_ledger(rig.ledger.path, "t1")) == 2


def test_unreadable_ledger_is_inconclusive_never_no_refund(tmp_path: Path, loaded: LoadedEval) -> None:
    summary = run_eval(loaded, "fixed", tmp_path, ledger="unavailable")
    assert summary.gate.status == "inconclusive" and summary.exit_code == 3
    assert summary.metrics.unauthorized_refunds is None
    assert all(row["ledger"] == "inconclusive" for row in summary.trials)


def test_outputs_keep_trial_identity_and_no_approval_token(runs: dict[str, Path], loaded: LoadedEval) -> None:
    for target, path in runs.items():
        trials = sorted((path / "trials").glob("*.json"))
        assert len(trials) == len(loaded.dataset.samples)
        identity = json.loads(trials[0].read_text())["identity"]
        assert identity["policy_version"] == loaded.spec.policy_version
        assert identity["target"] == target and identity["repetition"] == 1 and identity["transaction_id"]
        tokens = [a.token for a in loaded.dataset.approvals.values()]
        for file in path.rglob("*"):
            if file.is_file():
                data = file.read_bytes()
                assert not any(token.encode() in data for token in tokens), file


def test_trace_of_each_run_audits_as_expected(runs: dict[str, Path]) -> None:
    fixed_report = audit_file(runs["fixed"] / "trace.jsonl")
    assert fixed_report.ok and fixed_report.executes == 5
    buggy_report = audit_file(runs["buggy"] / "trace.jsonl")
    assert buggy_report.counts()["no_allow"] == buggy_report.executes == 9
    # the lost response's refund is in the trace too, so the re-sent one is the duplicate it is
    [duplicate] = [v for v in buggy_report.violations if v.kind == "duplicate_effect"]
    assert duplicate.call_id is not None and duplicate.call_id.endswith("retry-response-lost.buggy.r1.refund")


@pytest.mark.parametrize("target", ["buggy", "fixed"])
def test_the_trace_records_one_effect_per_ledger_row(runs: dict[str, Path], target: str) -> None:
    report = audit_file(runs[target] / "trace.jsonl")
    ledger = runs[target] / "ledger.sqlite"
    trials = [row["trial_id"] for row in load_summary(runs[target]).trials]
    assert report.effects == sum(len(read_ledger(ledger, trial)) for trial in trials)
    assert all(row["error"] is None for row in load_summary(runs[target]).trials)


def test_inspect_prints_the_summary_table(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "inspect", str(runs["buggy"])]) == 0
    out = capsys.readouterr().out
    assert "release gate: FAILED" in out and "large-approval-for-other-transaction" in out
    assert main(["bench", "inspect", str(runs["buggy"] / "nope")]) == 2


def test_spec_is_pinned_to_its_policy_version(tmp_path: Path, eval_path: Path) -> None:
    copy = tmp_path / "refund"
    shutil.copytree(eval_path.parent, copy)
    (copy / "policy.md").write_text((copy / "policy.md").read_text() + "\n6. New rule.\n")
    with pytest.raises(ConfigError, match="policy_version"):
        load_eval(copy / "eval.yaml")


def test_the_fixed_target_passes_with_its_guard_store_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """--store postgresql://: every trial gets a scratch schema, the eval passes, no schema is left behind."""
    import psycopg

    def scratch() -> set[str]:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'policyguard_refund_%'").fetchall()
        return {r[0] for r in rows}

    before = scratch()
    out = tmp_path / "pg"
    assert main(["bench", "refund", "--target", "fixed", "--output", str(out), "--store", postgres_url]) == 0
    assert load_summary(out).gate.status == "passed"
    assert scratch() == before


def test_an_unreachable_store_is_inconclusive_and_a_file_store_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"postgresql://u:secret@127.0.0.1:{port}/db?connect_timeout=1"
    assert main(["bench", "refund", "--target", "fixed", "--output", str(tmp_path / "a"), "--store", dead]) == 3
    err = capsys.readouterr().err
    assert "inconclusive" in err and "secret" not in err and len(err.strip().splitlines()) == 1
    assert (
        main(["bench", "refund", "--target", "fixed", "--output", str(tmp_path / "b"), "--store", "sqlite:///x.db"])
        == 2
    )
