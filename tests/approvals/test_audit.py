"""`policyguard audit` reads escalate / approve / deny events and checks every allow that cites an approval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policyguard.approvals.flow import decide
from policyguard.audit.inv1 import TraceFormatError, audit_file, audit_records
from policyguard.audit.trace import Trace

from .conftest import Rig, refund_call

SHA_A, SHA_B = "a" * 64, "b" * 64
V = "sha256:" + "1" * 64


def record(t: int, event: str, call_id: str = "c1", sha: str = SHA_A, **fields: Any) -> dict[str, Any]:
    base = {"v": "policyguard.trace/1", "event": event, "t": t, "ts": 1_800_000_000.0 + t}
    if event != "revoke":
        base.update(call_id=call_id, tool="issue_refund", args_sha256=sha)
    if event == "allow":
        base.update(policy_version=V, expires_at=1_900_000_000.0)
    return {**base, **fields}


def kinds(records: list[dict[str, Any]]) -> list[str]:
    return [v.kind for v in audit_records(records).violations]


def test_the_whole_flow_audits_clean(rig: Rig, tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    rig.trace = Trace(path)
    rig.guard.trace = rig.trace
    rig.executor.trace = rig.trace
    waiting = rig.check(refund_call("c1"))
    assert waiting.approval_id is not None
    decide(rig.queue, waiting.approval_id, "approve", "alice", "ok", trace=rig.trace)
    decision, result = rig.attempt(refund_call("c2"))
    assert result is not None and result.executed
    rig.trace.close()
    report = audit_file(path)
    assert report.ok and report.executes == 1 and report.effects == 1
    events = [line for line in path.read_text().splitlines()]
    assert sum('"event": "approve"' in e for e in events) == 2  # the reviewer's, and the guard's when it spent it


def test_an_allow_citing_no_approval_event_is_unapproved() -> None:
    assert kinds([record(1, "allow", "c2", approval_id="apr-1")]) == ["unapproved"]


def test_an_allow_citing_a_denied_approval_is_unapproved() -> None:
    trace = [
        record(1, "escalate", approval_id="apr-1"),
        record(2, "deny", approval_id="apr-1", by="reviewer"),
        record(3, "approve", approval_id="apr-1"),
        record(4, "allow", "c2", approval_id="apr-1"),
    ]
    assert kinds(trace) == ["unapproved"]


def test_an_allow_for_other_arguments_is_an_approval_mismatch() -> None:
    trace = [record(1, "approve", approval_id="apr-1"), record(2, "allow", "c2", sha=SHA_B, approval_id="apr-1")]
    assert kinds(trace) == ["approval_mismatch"]


def test_an_approval_spent_twice_is_reused() -> None:
    trace = [
        record(1, "approve", approval_id="apr-1"),
        record(2, "allow", "c2", approval_id="apr-1"),
        record(3, "allow", "c3", approval_id="apr-1"),
    ]
    assert kinds(trace) == ["approval_reused"]


def test_an_approval_given_after_the_allow_does_not_cover_it() -> None:
    trace = [record(1, "allow", "c2", approval_id="apr-1"), record(2, "approve", approval_id="apr-1")]
    assert kinds(trace) == ["unapproved"]


@pytest.mark.parametrize(
    "broken",
    [
        record(1, "approve"),  # no approval_id
        record(1, "escalate", approval_id=7),
        record(1, "Approve", approval_id="apr-1"),
    ],
)
def test_malformed_approval_events_are_format_errors(broken: dict[str, Any]) -> None:
    with pytest.raises(TraceFormatError):
        audit_records([broken])
