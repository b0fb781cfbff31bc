"""Guard.refuse: a block an integration decided (the user declined) is recorded like any other block."""

from __future__ import annotations

from typing import Any

from policyguard import Guard
from policyguard.audit.trace import Trace
from policyguard.decision import RequirementResult
from policyguard.enforcement.scoped import CallIdentity
from policyguard.enforcement.store import SQLiteStore
from policyguard.trajectory.messages import ToolCall

CALL = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 5})


def test_a_refusal_is_traced_counted_and_remembered_as_a_deny(checklist: Any, policy_text: str, tmp_path: Any) -> None:
    trace, store = Trace(), SQLiteStore(tmp_path / "s.db")
    guard = Guard(checklist, policy_text, trace=trace, denials=store)
    unverified = [RequirementResult(id="user-confirmed", status="UNVERIFIED", judged_by="none")]
    decision = guard.refuse(
        CALL, "approver", "The user declined.", error="elicitation: declined", requirements=unverified
    )
    assert (decision.outcome, decision.stage, decision.message) == ("block", "approver", "The user declined.")
    assert (decision.call_id, decision.tool, decision.args_sha256) == ("c1", "issue_refund", CALL.args_sha256)
    assert [e["event"] for e in trace.events] == ["submit", "deny", "decision"]
    assert trace.events[-1]["requirements"][0]["status"] == "UNVERIFIED"
    assert guard.counters.blocked == 1 and guard.counters.passed == 0
    denied = CallIdentity(None, "c1", CALL.name, CALL.args_sha256)  # no trajectory: the call has no place
    assert any(store.is_denied(key) for key in denied.deny_lookups())  # deny wins: an executor refuses it later


def test_advisory_mode_never_softens_a_refusal(checklist: Any, policy_text: str) -> None:
    guard = Guard(checklist, policy_text, strict=False)
    decision = guard.refuse(CALL, "approver", "The user declined.")
    assert decision.outcome == "block" and decision.verdict == "BLOCK" and not decision.warnings
