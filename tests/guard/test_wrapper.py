"""GuardedTools: a plain OpenAI-style loop keeps working, and blocked calls never run."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from policyguard import Decision, GuardedTools, ToolCall, Trajectory, parse_checklist
from policyguard.guard.core import Guard
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version

POLICY = "Refund only orders that were read first.\n"


class RefuseRefundsGate:
    """A gate that blocks every refund and lets anything else through."""

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        if call.name == "issue_refund":
            return Decision.block("gate", "Refunds are not allowed for this order; tell the user.")
        return Decision.allow("gate")


@pytest.fixture
def tools() -> GuardedTools:
    checklist = parse_checklist(
        textwrap.dedent(
            f"""
            policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
            tools:
              get_order: {{mutating: false}}
              issue_refund: {{}}
              rename_order: {{}}
            """
        )
    )
    ledger: list[Any] = []

    def get_order(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "captured": 50}

    def issue_refund(order_id: str, amount: float) -> str:
        ledger.append((order_id, amount))
        return "issued"

    def rename_order(order_id: str, name: str) -> str:
        raise ValueError("orders cannot be renamed")

    guard = Guard(checklist, POLICY, gate=RefuseRefundsGate(), allow_unverified=True)
    wrapped = GuardedTools(guard, {"get_order": get_order, "issue_refund": issue_refund, "rename_order": rename_order})
    wrapped.ledger = ledger  # type: ignore[attr-defined]
    return wrapped


def _assistant(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


def test_read_only_tool_runs_and_returns_its_result(tools: GuardedTools) -> None:
    messages = [
        {"role": "user", "content": "where is my order O1?"},
        _assistant("call_1", "get_order", {"order_id": "O1"}),
    ]
    reply = tools.openai_chat(messages[-1]["tool_calls"][0], messages)
    assert reply == {"role": "tool", "tool_call_id": "call_1", "content": '{"order_id": "O1", "captured": 50}'}


def test_blocked_call_returns_remediation_under_the_same_call_id_and_never_runs(tools: GuardedTools) -> None:
    messages = [
        {"role": "user", "content": "refund O1"},
        _assistant("call_2", "issue_refund", {"order_id": "O1", "amount": 50}),
    ]
    reply = tools.openai_chat(messages[-1]["tool_calls"][0], messages)
    assert reply["tool_call_id"] == "call_2"
    assert reply["content"] == "Error: Refunds are not allowed for this order; tell the user."  # reads back as failed
    assert tools.ledger == []  # type: ignore[attr-defined]
    snapshot = tools.guard.counters
    assert snapshot.blocked == 1 and snapshot.executed == 0


def test_tool_exception_goes_back_to_the_model_as_an_error(tools: GuardedTools) -> None:
    outcome = tools.run(ToolCall(id="c3", name="rename_order", arguments={"order_id": "O1", "name": "x"}), Trajectory())
    assert outcome.executed and outcome.is_error
    assert "cannot be renamed" in outcome.content


def test_a_checklist_tool_with_no_function_is_refused_when_guard_meets_host(tools: GuardedTools) -> None:
    from policyguard.errors import ConfigError

    checklist = tools.guard.checklist.model_copy(deep=True)
    checklist.tools["archive_order"] = checklist.tools["rename_order"]
    guard = Guard(checklist, POLICY, gate=RefuseRefundsGate(), allow_unverified=True)
    with pytest.raises(ConfigError, match="'archive_order'"):
        GuardedTools(guard, dict(tools.tools))
