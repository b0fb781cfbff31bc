"""The Pydantic AI capability: a block never runs the tool, an escalation defers to a person, results are recorded.

Every run uses Pydantic AI's own FunctionModel (a model written as a function of the history): no key.
The credit desk of tests/session/credits.py: one goodwill credit per conversation, a limit only raised.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from policyguard import Guard  # noqa: E402
from policyguard.decision import Decision  # noqa: E402
from policyguard.integrations.pydantic_ai import PolicyGuardCapability, trajectory  # noqa: E402
from policyguard.session import MemorySessionStore  # noqa: E402
from tests.session.credits import Desk, make_guard  # noqa: E402

Turn = list[tuple[str, str, dict[str, Any]]]


def scripted(*turns: Turn | str) -> FunctionModel:
    """A model answering each request with the next turn: tool calls (id, tool, args) or a text."""
    script = deque(turns)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = script.popleft()
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(content=turn)])
        return ModelResponse(parts=[ToolCallPart(tool_name=n, args=a, tool_call_id=i) for i, n, a in turn])

    return FunctionModel(answer)


def agent(model: FunctionModel, desk: Desk, guard: Guard, **kwargs: Any) -> Agent[None, Any]:
    return Agent(model, tools=desk.tools(), capabilities=[PolicyGuardCapability(guard)], **kwargs)


def guard() -> Guard:
    return make_guard(sessions=MemorySessionStore(), session_result_wait_s=0)


CREDIT = {"user_id": "u1", "amount": 50}


def returns(messages: list[ModelMessage], call_id: str) -> ToolReturnPart:
    [part] = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id]
    return part


def test_a_second_credit_never_runs_and_the_model_reads_the_remediation() -> None:
    desk = Desk()
    model = scripted([("c1", "send_credit", CREDIT)], [("c2", "send_credit", CREDIT)], "Only one credit.")
    result = agent(model, desk, guard()).run_sync("Two goodwill credits please.")
    assert [name for name, _ in desk.ran] == ["send_credit"]
    blocked = returns(result.all_messages(), "c2")
    assert blocked.outcome == "retried"
    assert "credit-once" in str(blocked.content)


def test_with_on_block_skip_the_remediation_is_the_tools_failed_result() -> None:
    desk = Desk()
    model = scripted([("c1", "send_credit", CREDIT)], [("c2", "send_credit", CREDIT)], "Only one credit.")
    capability = PolicyGuardCapability(guard(), on_block="skip")
    result = Agent(model, tools=desk.tools(), capabilities=[capability]).run_sync("Two credits.")
    assert len(desk.ran) == 1
    assert str(returns(result.all_messages(), "c2").content).startswith("Error:")


def test_an_escalation_ends_the_run_in_deferred_tool_requests_and_resumes_with_the_approval() -> None:
    class Escalating(Guard):
        async def acheck(self, *args: Any, **kwargs: Any) -> Decision:
            return Decision.await_approval("ap-1", "Credits need a supervisor's yes.")

    base = guard()
    escalating = Escalating(base.checklist, base.policy_text, gate=base.gate, allow_unverified=True)
    desk = Desk()
    model = scripted([("c1", "send_credit", CREDIT)], "The credit is sent.")
    bot = agent(model, desk, escalating, output_type=[str, DeferredToolRequests])
    first = bot.run_sync("A goodwill credit please.")
    assert isinstance(first.output, DeferredToolRequests)
    assert [c.tool_call_id for c in first.output.approvals] == ["c1"]
    assert first.output.metadata["c1"]["policyguard"] == "Credits need a supervisor's yes."
    assert desk.ran == []
    second = bot.run_sync(
        message_history=first.all_messages(), deferred_tool_results=DeferredToolResults(approvals={"c1": True})
    )
    assert desk.ran == [("send_credit", CREDIT)]
    assert second.output == "The credit is sent."


def test_an_error_in_the_guard_blocks_the_call() -> None:
    class Broken(Guard):
        async def acheck(self, *args: Any, **kwargs: Any) -> Decision:
            raise RuntimeError("store down")

    base = guard()
    desk = Desk()
    model = scripted([("c1", "send_credit", CREDIT)], "Sorry.")
    result = agent(model, desk, Broken(base.checklist, base.policy_text)).run_sync("A credit.")
    assert desk.ran == []
    assert "store down" in str(returns(result.all_messages(), "c1").content)


def test_runs_that_continue_one_history_share_the_record_even_after_the_history_is_trimmed() -> None:
    """The second run is sent only its last user prompt (a trimmed history); the record still has the credit."""
    shared, desk = guard(), Desk()
    first = agent(scripted([("c1", "send_credit", CREDIT)], "Sent."), desk, shared).run_sync("A credit.")
    trimmed = [ModelRequest(parts=[UserPromptPart(content="(summary) the user asked about credits")],
                            conversation_id=first.all_messages()[-1].conversation_id)]  # fmt: skip
    model = scripted([("c2", "send_credit", CREDIT)], "Only one.")
    agent(model, desk, shared).run_sync("Another credit.", message_history=trimmed)
    assert [name for name, _ in desk.ran] == ["send_credit"]


def test_the_same_id_each_turn_is_a_new_call_and_the_second_credit_is_still_blocked() -> None:
    desk = Desk()
    model = scripted([("call_0", "send_credit", CREDIT)], [("call_0", "send_credit", CREDIT)], "Done.")
    agent(model, desk, guard()).run_sync("Two credits.")
    assert len(desk.ran) == 1


def test_a_read_issued_with_a_raise_in_one_response_is_not_the_state_after_it() -> None:
    desk = Desk(limit=10)
    model = scripted(
        [("r0", "get_account", {"account_id": "A1"})],
        [("w1", "set_limit", {"account_id": "A1", "limit": 20}), ("r1", "get_account", {"account_id": "A1"})],
        [("w2", "set_limit", {"account_id": "A1", "limit": 15})],
        "Done.",
    )
    result = agent(model, desk, guard()).run_sync("Raise my limit, then set it to 15.")
    assert ("set_limit", {"account_id": "A1", "limit": 15}) not in desk.ran
    assert returns(result.all_messages(), "w2").outcome == "retried"


def test_the_trajectory_keeps_failed_returns_as_failures_and_the_instructions_once() -> None:
    desk = Desk()
    model = scripted([("c1", "send_credit", CREDIT)], [("c2", "send_credit", CREDIT)], "Only one.")
    result = agent(model, desk, guard(), instructions="Be kind.").run_sync("Two credits.")
    messages = trajectory(result.all_messages()).messages
    assert [m.role for m in messages].count("system") == 1 and messages[0].content == "Be kind."
    [blocked] = [m for m in messages if m.tool_call_id == "c2"]
    assert blocked.is_error and (blocked.content or "").startswith("Error:")
