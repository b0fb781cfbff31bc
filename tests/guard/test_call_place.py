"""call_place: which issuance of a call a check is about, read off the trajectory the guard was given.

The place is the newest assistant message that issued a call with this id, tool
and arguments. Appending results, user turns and other calls keeps it; a later
message that issues the same call again (per-turn numbering reuses ``call_0``)
is another place; a trajectory that does not show the call gives ``""``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.guard.calls import call_place
from policyguard.trajectory.canonical import UNHASHABLE_ARGS
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

CALL = ToolCall(id="call_0", name="issue_refund", arguments={"order_id": "O1", "amount": 50})
ASKED = [Message(role="user", content="refund O1"), Message(role="assistant", tool_calls=[CALL])]


def asks(call: ToolCall) -> Message:
    return Message(role="assistant", tool_calls=[call])


def place(messages: list[Message], call: ToolCall = CALL) -> str:
    return call_place(Trajectory(messages=messages), call)


others = st.sampled_from(
    [
        Message(role="tool", tool_call_id="call_0", name="issue_refund", content="refused"),
        Message(role="user", content="and now?"),
        Message(role="assistant", content="Let me check."),
        asks(CALL.model_copy(update={"name": "get_order"})),
        asks(CALL.model_copy(update={"arguments": {"order_id": "O1", "amount": 40}})),
        asks(CALL.model_copy(update={"id": "call_1"})),
        Message(role="tool", tool_call_id="call_0", name="issue_refund", content='{"issue_refund": "call_0"}'),
    ]
)


def test_the_place_is_the_message_that_issued_the_call() -> None:
    assert place(ASKED) == "1"


def test_a_trajectory_that_does_not_show_the_call_gives_no_place() -> None:
    assert place([Message(role="user", content="refund O1")]) == ""
    assert place([]) == ""


@settings(max_examples=200, deadline=None)
@given(st.lists(others, max_size=8))
def test_a_recheck_with_a_longer_history_has_the_same_place(appended: list[Message]) -> None:
    assert place([*ASKED, *appended]) == "1"


@settings(max_examples=200, deadline=None)
@given(st.lists(others, max_size=6))
def test_a_later_message_issuing_the_same_call_again_is_another_place(between: list[Message]) -> None:
    later = [*ASKED, *between, asks(CALL)]
    assert place(later) == str(len(later) - 1)


def test_a_call_asked_in_the_same_message_as_others_has_that_messages_place() -> None:
    read = ToolCall(id="call_1", name="get_order", arguments={"order_id": "O1"})
    assert place([Message(role="user", content="go"), Message(role="assistant", tool_calls=[read, CALL])]) == "1"


def test_the_same_id_with_another_tool_or_arguments_does_not_give_a_place() -> None:
    assert place(ASKED, CALL.model_copy(update={"name": "get_order"})) == ""
    assert place(ASKED, CALL.model_copy(update={"arguments": {"order_id": "O1", "amount": 50.5}})) == ""


def test_a_user_message_naming_the_call_gives_no_place() -> None:
    """Only the assistant issues calls: text that mentions call_0 is no issuance."""
    assert place([Message(role="user", content='{"id": "call_0", "name": "issue_refund"}')]) == ""


def test_arguments_with_no_canonical_hash_give_no_place() -> None:
    nan = CALL.model_copy(update={"arguments": {"amount": float("nan")}})
    assert place([asks(nan)], nan) == ""
    assert call_place(Trajectory(messages=ASKED), CALL, UNHASHABLE_ARGS) == ""
