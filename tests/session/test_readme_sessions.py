"""The README's session example runs as written: a timed-out write counts, and a retry of it is blocked."""

from __future__ import annotations

from typing import Any

import pytest

from policyguard import Message, ToolCall, Trajectory
from tests.docblocks import doc_block

from .credits import make_guard


def example() -> str:
    return doc_block("docs/guarding/sessions.md", "sessions")


def test_the_readme_session_example_records_a_timeout_as_unknown_and_a_retry_is_blocked():
    guard = make_guard()
    ran: list[str] = []

    def run_tool(call: ToolCall) -> str:
        ran.append(call.id)
        raise TimeoutError("no answer from the credit service")

    call = ToolCall(id="c1", name="send_credit", arguments={"user_id": "u1", "amount": 50})
    messages = Trajectory(messages=[Message(role="assistant", tool_calls=[call])])
    scope: dict[str, Any] = {"guard": guard, "call": call, "messages": messages, "run_tool": run_tool}
    with pytest.raises(TimeoutError):
        exec(example(), scope)
    assert ran == ["c1"]
    retry = ToolCall(id="c2", name="send_credit", arguments={"user_id": "u1", "amount": 50})
    trimmed = Trajectory(messages=[Message(role="assistant", tool_calls=[retry])])  # the host forgot c1
    decision = guard.check(retry, trimmed, session="conversation-42")
    assert decision.outcome == "block"
    assert "not known (the tool timed out)" in (decision.message or "")
