"""Anthropic Messages <-> Trajectory."""

from __future__ import annotations

import json

import pytest

from policyguard.errors import FormatError
from policyguard.trajectory.formats import anthropic
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

LOOKUP_ID = "toolu_01A09q90qw90lq917835lq9X"
CANCEL_ID = "toolu_01D7FLrfh4GYq7yT1ULFeyMV"
P1, P2 = "toolu_01JbX4YcW2kq8N5vRtLmP3sA", "toolu_01QwE7rTyU9iOpA2sDfG4hJk"


def test_reads_the_airline_conversation(load):
    trajectory = anthropic.read(load("airline_anthropic.json"))

    roles = [m.role for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]
    assert trajectory.messages[0].content.startswith("You are a customer service agent")
    assert trajectory.messages[-1] == Message(
        role="assistant",
        tool_calls=[ToolCall(id=CANCEL_ID, name="cancel_reservation", arguments={"reservation_id": "59XX6W"})],
    )
    [result] = trajectory.tool_results()
    assert result.call.id == LOOKUP_ID and result.json()["insurance"] == "yes"


def test_system_may_be_given_beside_a_message_list(load):
    request = load("airline_anthropic.json")
    assert anthropic.read(request["messages"], system=request["system"]) == anthropic.read(request)
    assert anthropic.read(request["messages"]).messages[0].role == "user"
    with pytest.raises(FormatError, match="not both"):
        anthropic.read(request, system="again")


def test_canonical_request_round_trips(load):
    original = load("airline_anthropic.json")
    assert anthropic.write(anthropic.read(original)) == original


def test_parallel_results_split_into_tool_messages_then_user_text(load):
    trajectory = anthropic.read(load("anthropic_parallel.json"))

    system, user, assistant, first, second, follow_up = trajectory.messages
    assert system.role == "system" and system.content.startswith("You are a customer service agent")
    assert user.content.startswith("I want to cancel")
    assert assistant.content == "Let me look up both reservations."  # the thinking block is dropped
    assert [c.arguments["reservation_id"] for c in assistant.tool_calls] == ["XEHM4B", "59XX6X"]
    assert (first.role, first.tool_call_id, first.is_error) == ("tool", P1, False)
    assert json.loads(first.content)["reservation_id"] == "XEHM4B"
    assert (second.role, second.tool_call_id, second.is_error) == ("tool", P2, True)
    assert second.content == "Error: Reservation 59XX6X not found"
    assert follow_up == Message(
        role="user", content="Sorry, the second one is 59XX6W. Also, do I have any other upcoming flights?"
    )


def test_text_before_a_tool_result_keeps_its_place():
    trajectory = anthropic.read(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here you go:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
                    {"type": "text", "text": "Thanks."},
                ],
            },
        ]
    )
    assert [(m.role, m.content) for m in trajectory.messages[1:]] == [
        ("user", "Here you go:\n[image]"),
        ("tool", "done"),
        ("user", "Thanks."),
    ]
    assert anthropic.read(anthropic.write(trajectory)) == trajectory


def test_writer_groups_results_with_the_next_user_turn(load):
    trajectory = anthropic.read(load("anthropic_parallel.json"))
    written = anthropic.write(trajectory)

    assert written["system"] == trajectory.messages[0].content
    assert [m["role"] for m in written["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in written["messages"][2]["content"]] == ["tool_result", "tool_result", "text"]
    assert written["messages"][2]["content"][1]["is_error"] is True
    assert "is_error" not in written["messages"][2]["content"][0]
    assert anthropic.read(written) == trajectory


def test_trajectories_round_trip_including_consecutive_user_turns(load):
    consecutive = Trajectory(
        messages=[
            Message(role="user", content="Cancel 59XX6W."),
            Message(role="user", content="Actually, XEHM4B too."),
            Message(role="assistant", content="One moment."),
        ]
    )
    for trajectory in (
        anthropic.read(load("airline_anthropic.json")),
        anthropic.read(load("anthropic_parallel.json")),
        consecutive,
    ):
        assert anthropic.read(anthropic.write(trajectory)) == trajectory


def test_system_text_after_the_dialogue_started_cannot_be_written():
    trajectory = Trajectory(messages=[Message(role="user", content="hi"), Message(role="system", content="late")])
    with pytest.raises(FormatError, match="message 1: anthropic takes system text only before the dialogue"):
        anthropic.write(trajectory)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"role": "system", "content": "x"}, "unknown role 'system'"),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "[]"}]},
            "block 0: call 't': 'input' must be an object",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}],
            },
            "block 0: unsupported assistant block type 'server_tool_use'",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]},
            "block 0: missing or empty 'tool_use_id'",
        ),
        ({"role": "user", "content": [{"type": "text"}]}, "'text' part without a 'text' string"),
    ],
)
def test_unreadable_messages_raise_naming_the_index(message, error):
    with pytest.raises(FormatError, match=f"message 1[,:] .*{error}"):
        anthropic.read([{"role": "user", "content": "hi"}, message])


def test_reads_sdk_blocks_inside_plain_messages():
    from anthropic.types import TextBlock, ToolUseBlock

    blocks = [
        TextBlock(type="text", text="Cancelling now."),
        ToolUseBlock(type="tool_use", id=CANCEL_ID, name="cancel_reservation", input={"reservation_id": "59XX6W"}),
    ]
    trajectory = anthropic.read([{"role": "user", "content": "yes"}, {"role": "assistant", "content": blocks}])
    assert trajectory.messages[1] == Message(
        role="assistant",
        content="Cancelling now.",
        tool_calls=[ToolCall(id=CANCEL_ID, name="cancel_reservation", arguments={"reservation_id": "59XX6W"})],
    )
    assert anthropic.tool_call_from_anthropic(blocks[1]) == trajectory.messages[1].tool_calls[0]


def test_tool_error_message_is_an_error_tool_result_for_the_call():
    blocked = anthropic.tool_error_message(CANCEL_ID, "Ask for the reason for cancellation first.")
    assert blocked == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": CANCEL_ID,
                "content": "Ask for the reason for cancellation first.",
                "is_error": True,
            }
        ],
    }
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": CANCEL_ID, "name": "cancel_reservation", "input": {}}],
    }
    [result] = anthropic.read([call, blocked]).tool_results()
    assert result.is_error and result.call.id == CANCEL_ID
