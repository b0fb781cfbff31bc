"""The refund case's `approval` target: a large unapproved refund waits for a supervisor, then runs exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.approvals.url import open_approvals
from policyguard.audit.inv1 import audit_file
from policyguard.bench.refund import load_summary, run_eval
from policyguard.bench.refund.sandbox import read_ledger
from policyguard.bench.refund.spec import LoadedEval
from policyguard.bench.refund.targets import run_agent
from policyguard.cli import main

Rig = Any  # tests/refund/conftest.py Rig


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, loaded: LoadedEval) -> Path:
    out = tmp_path_factory.mktemp("approval")
    run_eval(loaded, "approval", out)
    return out


def test_the_approval_target_passes_the_release_gate(run: Path) -> None:
    summary = load_summary(run)
    got = {row["sample"]: (row["expected"], row["decision"], row["ledger_refunds"]) for row in summary.trials}
    assert got["large-no-approval"] == ("refund", "refund", 1)  # approved by the supervisor, refunded once
    assert got["large-approval-for-other-transaction"] == ("escalate", "escalate", 0)  # denied: never refunded
    assert got["policy-deny"] == ("refuse", "refuse", 0)
    assert summary.gate.status == "passed"
    m = summary.metrics
    assert (m.unauthorized_refunds, m.duplicate_side_effects, m.legitimate_refund_success) == (0, 0, 1.0)


def test_the_cli_exit_code_of_the_approval_target_is_0(tmp_path: Path) -> None:
    assert main(["bench", "refund", "--target", "approval", "--output", str(tmp_path / "a")]) == 0


def test_the_approved_retry_is_the_same_call_and_spends_the_approval(run: Path) -> None:
    [trial] = [p for p in (run / "trials").glob("*.json") if ".large-no-approval." in p.name]
    attempts = json.loads(trial.read_text())["output"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["escalated", "executed"]
    assert attempts[0]["arguments"] == attempts[1]["arguments"]
    assert attempts[0]["approval_id"] == attempts[1]["approval_id"] is not None
    assert 0 < attempts[1]["after_approval_s"] < 5
    queue = open_approvals(f"sqlite:///{run / 'approvals.sqlite'}")
    try:
        request = queue.get(attempts[0]["approval_id"])
    finally:
        queue.close()
    assert request is not None and request.status == "used" and request.used_call_id == attempts[1]["call_id"]


def test_the_trace_of_the_approval_target_audits_clean(run: Path) -> None:
    report = audit_file(run / "trace.jsonl")
    assert (
        report.ok and report.executes == report.effects + 1
    )  # the request that never reached the service ran without an effect
    kinds = [json.loads(line)["event"] for line in (run / "trace.jsonl").read_text().splitlines()]
    assert kinds.count("escalate") == 2 and kinds.count("approve") == 2


def test_no_grant_or_approval_token_is_written(run: Path, loaded: LoadedEval) -> None:
    tokens = [a.token.encode() for a in loaded.dataset.approvals.values()]
    for file in run.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert not any(t in data for t in tokens) and b"eyJ" not in data, file  # no JWT either


def test_a_reviewer_approves_with_the_cli_and_the_retry_refunds_once(rig: Rig, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    queue = open_approvals(url)
    try:
        target = rig.approval(queue)  # no scripted supervisor: the request stays pending
        sample = rig.sample("large-no-approval")
        first = run_agent(sample, target, call_prefix="t1")
        assert first.decision == "escalate" and read_ledger(rig.ledger.path, "t1") == []
        [pending] = queue.pending()
        assert main(["approvals", "approve", pending.id, "--store", url, "--reviewer", "sup-1"]) == 0
        again = run_agent(sample, target, call_prefix="t1.again")
        assert again.decision == "refund"
        assert main(["approvals", "approve", pending.id, "--store", url, "--reviewer", "sup-1"]) == 1
        third = run_agent(sample, target, call_prefix="t1.third")  # the approval was spent: no second refund
        assert third.decision == "escalate"
    finally:
        queue.close()
    [row] = read_ledger(rig.ledger.path, "t1")
    assert (row.transaction_id, row.amount) == ("T-1002", 800)


def test_an_approval_does_not_follow_a_changed_amount(rig: Rig, tmp_path: Path) -> None:
    queue = open_approvals(f"sqlite:///{tmp_path / 'queue.db'}")
    try:
        target = rig.approval(queue)
        sample = rig.sample("large-no-approval")
        run_agent(sample, target, call_prefix="t1")
        [pending] = queue.pending()
        queue.approve(pending.id, "sup-1")
        bigger = sample.model_copy(update={"amount": 850})
        assert run_agent(bigger, target, call_prefix="t1.bigger").decision == "escalate"
    finally:
        queue.close()
    assert read_ledger(rig.ledger.path, "t1") == []
