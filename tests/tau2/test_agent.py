"""The guarded agent's loop, with a scripted model and a guard double."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.agent import GIVE_UP, NOT_EXECUTED  # noqa: E402
from policyguard.decision import Decision  # noqa: E402
from policyguard.trajectory.messages import ToolCall, Trajectory  # noqa: E402

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
    from policyguard.bench.tau2.domain import DomainData
    from policyguard.bench.tau2.scripted import scripted_agent_class

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

    agent = _agent([], BlockWrites(), is_mutating=lambda name: name.startswith("cancel_"))
    both = AssistantMessage(
        role="assistant",
        tool_calls=[
            Tau2Call(id="b", name="cancel_reservation", arguments={"reservation_id": "R2"}),
            Tau2Call(id="a", name="get_user_details", arguments={"user_id": "u"}),
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


class Recording:
    """Allows everything; remembers each call with the tool results it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []

    def check(self, call: ToolCall, trajectory: Trajectory) -> Decision:
        self.seen.append((call.id, [m.content or "" for m in trajectory.messages if m.role == "tool"]))
        return Decision.allow("gate")


def _tool_result(call_id: str, content: str) -> Any:
    from tau2.data_model.message import ToolMessage

    return ToolMessage(id=call_id, role="tool", content=content, requestor="assistant")


def test_a_second_change_in_one_message_is_held_and_judged_on_the_state_after_the_first() -> None:
    """[bags 2->5, bags 5->3] in one message: the second waits for the first's result, with no model call."""
    guard = Recording()
    agent = _agent([], guard)
    replies = iter([_two_changes()])
    agent.generate_model_message = lambda messages: next(replies)  # a second model call would raise
    first, state = agent.generate_next_message(_user("change my bags twice"), agent.get_init_state())
    assert [c.id for c in first.tool_calls] == ["a"] and [c.id for c in agent.held] == ["b"]
    second, state = agent.generate_next_message(_tool_result("a", '{"total_baggages": 5}'), state)
    assert [c.id for c in second.tool_calls] == ["b"] and agent.held == []
    assert guard.seen == [("a", []), ("b", ['{"total_baggages": 5}'])]  # b judged after a's result


def test_a_held_change_the_guard_blocks_is_answered_and_the_model_asked_again() -> None:
    from tau2.data_model.message import AssistantMessage

    agent = _agent([], BlockWrites(), is_mutating=lambda name: name.startswith("cancel_"))
    calls = AssistantMessage(
        role="assistant",
        tool_calls=[
            _tau2_call("r", "get_reservation_details", {"reservation_id": "R1"}),
            _tau2_call("c", "cancel_reservation", {"reservation_id": "R1"}),
        ],
    )
    replies = iter([calls, AssistantMessage(role="assistant", content="I cannot cancel it.")])
    agent.generate_model_message = lambda messages: next(replies)
    first, state = agent.generate_next_message(_user("cancel R1"), agent.get_init_state())
    assert [c.id for c in first.tool_calls] == ["r"]
    reply, state = agent.generate_next_message(_tool_result("r", '{"reservation_id": "R1"}'), state)
    assert reply.content == "I cannot cancel it."
    answers = {m.id: m.content for m in state.messages if m.role == "tool"}
    assert answers == {"r": '{"reservation_id": "R1"}', "c": "Not allowed (R1)."}


def _tau2_call(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    from tau2.data_model.message import ToolCall as Tau2Call

    return Tau2Call(id=call_id, name=name, arguments=arguments)


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
    reply, state = agent.generate_next_message(_user("hi"), agent.get_init_state())
    assert [c.id for c in reply.tool_calls] == ["r"]  # the write waits for the read's result
    reply, _ = agent.generate_next_message(_tool_result("r", '{"reservation_id": "R1"}'), state)
    assert [c.id for c in reply.tool_calls] == ["w", "r2"]
    assert all(e.outcome == "allow" for e in agent.events)
