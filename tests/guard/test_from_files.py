"""Guard.from_files wires what Guard takes: an approval queue, grants, denials and a session store."""

from __future__ import annotations

from pathlib import Path

from policyguard import Message, ToolCall, Trajectory
from policyguard.approvals.url import open_approvals
from policyguard.enforcement.grants import GrantIssuer, generate_keypair
from policyguard.enforcement.store import SQLiteStore
from policyguard.guard.core import Guard
from policyguard.session import MemorySessionStore
from policyguard.trajectory.canonical import policy_version

POLICY = "A refund above 500 needs a supervisor's approval.\n"
CHECKLIST = f"""\
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
tools:
  issue_refund:
    effect: {{transaction_arg: order_id, approval_threshold: 500}}
"""
DIALOGUE = Trajectory(messages=[Message(role="user", content="Please refund order O1, 800 USD.")])
ARGS = {"order_id": "O1", "amount": 800, "idempotency_key": "refund:O1"}


def _files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "policy.md").write_text(POLICY)
    (tmp_path / "checklist.yaml").write_text(CHECKLIST)
    return {"policy": tmp_path / "policy.md", "checklist": tmp_path / "checklist.yaml"}


def test_from_files_takes_an_approval_queue_and_escalates_to_it(tmp_path: Path) -> None:
    """Once: from_files had no approvals= at all, so a guard from files could only block an approvable call."""
    queue = open_approvals(f"sqlite:///{tmp_path / 'guard.db'}")
    try:
        guard = Guard.from_files(**_files(tmp_path), approvals=queue, principal="user-42")  # type: ignore[arg-type]
        decision = guard.check(ToolCall(id="c1", name="issue_refund", arguments=ARGS), DIALOGUE)
        assert decision.outcome == "escalate" and decision.approval_id is not None
        [request] = queue.all(status="pending")
        assert (request.id, request.principal) == (decision.approval_id, "user-42")
    finally:
        queue.close()


def test_from_files_passes_grants_denials_and_sessions_through(tmp_path: Path) -> None:
    issuer = GrantIssuer(generate_keypair()[0])
    denials = SQLiteStore(":memory:")
    sessions = MemorySessionStore()
    guard = Guard.from_files(**_files(tmp_path), grants=issuer, denials=denials, sessions=sessions)  # type: ignore[arg-type]
    assert (guard.grants, guard.denials, guard.sessions) == (issuer, denials, sessions)
    denials.close()
