"""The guarded agent's loop, with a scripted model and a guard double."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.decision import Decision  # noqa: E402
from policyguard.messages import ToolCall, Trajectory  # noqa: E402
from policyguard.tau2.agent import GIVE_UP, NOT_EXECUTED  # noqa: E402

pytestmark = pytest.mark.slow  # tau2's agent module imports litellm


class BlockWrites:
    """Blocks every cancel_reservation; remembers what it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def check(self, call: ToolCall, trajectory: Trajectory) -> Decision:
        self.seen.append((call.name, len(trajectory.messages)))
        if call.name == "cancel_reservation":
            return Decision.block("gate", f"Not allowed ({call.arguments['reservation_id']}).")
        return Decision.allow("read_only")


def _agent(script: list[Any], guard: Any, **kw: Any) -> Any:
    from policyguard.tau2.domain import DomainData
    from policyguard.tau2.scripted import scripted_agent_class

    env = DomainData.load("airline").fresh_env()
    return scripted_agent_class()(
        tools=env.get_tools(),
        domain_policy="policy",
        script=script,
        guard=guard,
        **{"is_mutating": lambda n: True, **kw},
    )


def _user(text: str) -> Any:
    from tau2.data_model.message import UserMessage

    return UserMessage(role="user", content=text)


def test_a_blocked_call_is_answered_in_the_agents_own_state_and_the_model_asked_again() -> None:
    guard = BlockWrites()
    agent = _agent([("call", "cancel_reservation", {"reservation_id": "R1"}), ("say", "I cannot cancel it.")], guard)
    state = agent.get_init_state()
    reply, state = agent.generate_next_message(_user("cancel R1"), state)
    assert reply.content == "I cannot cancel it." and not reply.tool_calls
    roles = [m.role for m in state.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert state.messages[2].error and state.messages[2].content == "Not allowed (R1)."
    assert [(e.tool, e.outcome) for e in agent.events] == [("cancel_reservation", "block")]
    # the guard saw the dialogue with the pending call as the newest of its message (system + user + assistant)
    assert guard.seen == [("cancel_reservation", 3)]


def test_every_call_of_a_message_with_a_blocked_call_is_answered() -> None:
    from tau2.data_model.message import AssistantMessage
    from tau2.data_model.message import ToolCall as Tau2Call

    agent = _agent([], BlockWrites())
    both = AssistantMessage(
        role="assistant",
        tool_calls=[
            Tau2Call(id="a", name="get_user_details", arguments={"user_id": "u"}),
            Tau2Call(id="b", name="cancel_reservation", arguments={"reservation_id": "R2"}),
        ],
    )
    replies = iter([both, AssistantMessage(role="assistant", content="ok")])
    agent.generate_model_message = lambda messages: next(replies)  # a model that answers with two calls at once
    state = agent.get_init_state()
    reply, state = agent.generate_next_message(_user("hi"), state)
    answers = {m.id: m.content for m in state.messages if m.role == "tool"}
    assert answers == {"a": NOT_EXECUTED, "b": "Not allowed (R2)."}
    assert reply.content == "ok"


def test_after_too_many_blocks_in_one_turn_the_agent_gives_up_politely() -> None:
    script = [("call", "cancel_reservation", {"reservation_id": f"R{i}"}) for i in range(3)]
    agent = _agent(script, BlockWrites(), max_blocks_per_turn=2)
    reply, _ = agent.generate_next_message(_user("cancel"), agent.get_init_state())
    assert reply.content == GIVE_UP
    assert len(agent.events) == 3 and agent.script == []


def test_without_a_guard_the_agent_is_a_plain_llm_agent() -> None:
    agent = _agent([("call", "cancel_reservation", {"reservation_id": "R1"})], None)
    reply, _ = agent.generate_next_message(_user("cancel"), agent.get_init_state())
    assert reply.tool_calls[0].name == "cancel_reservation" and agent.events == []


class AllowAll:
    """A guard that allows everything it is shown (each call judged alone, on the history before it)."""

    def check(self, call: ToolCall, trajectory: Trajectory) -> Decision:
        return Decision.allow("gate")


def _two_changes(first_id: str = "a", second_id: str = "b") -> Any:
    from tau2.data_model.message import AssistantMessage
    from tau2.data_model.message import ToolCall as Tau2Call

    bags = {"reservation_id": "R1", "nonfree_baggages": 0, "payment_id": "credit_card_1"}
    return AssistantMessage(
        role="assistant",
        tool_calls=[
            Tau2Call(id=first_id, name="update_reservation_baggages", arguments={**bags, "total_baggages": 5}),
            Tau2Call(id=second_id, name="update_reservation_baggages", arguments={**bags, "total_baggages": 3}),
        ],
    )


def test_a_second_change_in_one_message_is_blocked_even_when_each_alone_would_pass() -> None:
    """[bags 2->5, bags 5->3] in one message: the second would be judged on the state before the first."""
    from tau2.data_model.message import AssistantMessage

    agent = _agent([], AllowAll())
    replies = iter([_two_changes(), AssistantMessage(role="assistant", content="One at a time, then.")])
    agent.generate_model_message = lambda messages: next(replies)
    reply, state = agent.generate_next_message(_user("change my bags twice"), agent.get_init_state())
    answers = {m.id: m.content for m in state.messages if m.role == "tool"}
    assert answers["a"] == NOT_EXECUTED
    assert answers["b"].startswith("Make one change at a time: wait for the result of update_reservation_baggages")
    assert [(e.call_id, e.outcome, e.stage) for e in agent.events] == [("a", "allow", "gate"), ("b", "block", "guard")]
    assert reply.content == "One at a time, then." and not reply.tool_calls


def test_reads_then_one_change_in_one_message_still_pass() -> None:
    from tau2.data_model.message import AssistantMessage
    from tau2.data_model.message import ToolCall as Tau2Call

    agent = _agent([], AllowAll(), is_mutating=lambda name: name.startswith("update_"))
    message = AssistantMessage(
        role="assistant",
        tool_calls=[
            Tau2Call(id="r", name="get_reservation_details", arguments={"reservation_id": "R1"}),
            Tau2Call(id="w", name="update_reservation_baggages", arguments={"reservation_id": "R1"}),
            Tau2Call(id="r2", name="get_user_details", arguments={"user_id": "u"}),
        ],
    )
    agent.generate_model_message = lambda messages: message
    reply, _ = agent.generate_next_message(_user("hi"), agent.get_init_state())
    assert [c.id for c in reply.tool_calls] == ["r", "w", "r2"]
    assert all(e.outcome == "allow" for e in agent.events)
