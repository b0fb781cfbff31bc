"""INV-1 within sessions: a call is its call id in its session, and a guarded loop's trace audits clean."""

from __future__ import annotations

from policyguard.audit.inv1 import audit_records
from policyguard.audit.trace import Trace

H1 = "a" * 64
V1 = "sha256:" + "1" * 64


def test_an_execute_with_no_allow_in_its_session_is_a_violation_though_another_session_allowed_that_id():
    trace = Trace()
    trace.emit(
        "allow", call_id="call_5", tool="refund", args_sha256=H1, policy_version=V1, expires_at=1e12, session_id="a"
    )
    trace.emit("execute", call_id="call_5", tool="refund", args_sha256=H1, session_id="b")
    [violation] = audit_records(trace.events).violations
    assert (violation.kind, violation.call_id) == ("no_allow", "call_5")


def test_a_deny_in_one_session_does_not_taint_the_same_call_id_in_another():
    trace = Trace()
    trace.emit("deny", call_id="call_5", tool="refund", args_sha256=H1, session_id="a")
    trace.emit(
        "allow", call_id="call_5", tool="refund", args_sha256=H1, policy_version=V1, expires_at=1e12, session_id="b"
    )
    trace.emit("execute", call_id="call_5", tool="refund", args_sha256=H1, session_id="b")
    assert audit_records(trace.events).ok


def test_a_guarded_loop_in_two_sessions_with_the_same_ids_audits_clean():
    from policyguard import GuardedTools, Message, ToolCall, Trajectory

    from ..session.credits import make_guard

    trace = Trace(keep=True)
    guard = make_guard(trace=trace)
    for _ in range(2):  # two conversations, both numbering their calls call_1, call_2
        host = {name: (lambda **_: {}) for name in guard.checklist.tools}  # the checklist's tools, as the host has them
        tools = GuardedTools(guard, {**host, "send_credit": lambda **_: {"ok": True}})
        call = ToolCall(id="call_1", name="send_credit", arguments={"user_id": "u1", "amount": 5})
        outcome = tools.run(call, Trajectory(messages=[Message(role="assistant", tool_calls=[call])]))
        assert outcome.executed
    executes = [e for e in trace.events if e["event"] == "execute"]
    assert len(executes) == 2 and len({e["session_id"] for e in executes}) == 2
    assert audit_records(trace.events).ok
