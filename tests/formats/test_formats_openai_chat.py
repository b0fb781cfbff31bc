"""OpenAI Chat Completions <-> Trajectory."""

from __future__ import annotations

import json

import pytest

from policyguard.errors import FormatError
from policyguard.trajectory.formats import openai_chat
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

CANCEL_ID = "call_9FzKc2VdQ1bXw7NmT4pJ6yUa"


def test_reads_the_airline_conversation(load):
    trajectory = openai_chat.read(load("airline_chat.json"))

    roles = [m.role for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]
    lookup = trajectory.messages[2].tool_calls[0]
    assert lookup == ToolCall(
        id="call_Hq3xY7mWk2LpN8vR5tB1sD0e", name="get_reservation_details", arguments={"reservation_id": "59XX6W"}
    )
    assert trajectory.messages[2].content is None
    pending = trajectory.messages[-1].tool_calls[0]
    assert (pending.id, pending.name, pending.arguments) == (
        CANCEL_ID,
        "cancel_reservation",
        {"reservation_id": "59XX6W"},
    )
    [result] = trajectory.tool_results()
    assert result.call == lookup
    assert result.json()["insurance"] == "yes"


def test_canonical_messages_round_trip(load):
    original = load("airline_chat.json")
    assert openai_chat.write(openai_chat.read(original)) == original


def test_trajectory_round_trips(load):
    trajectory = openai_chat.read(load("airline_chat.json"))
    named = trajectory.model_copy(deep=True)
    named.messages[1].name = "daiki"
    for t in (trajectory, named):
        assert openai_chat.read(openai_chat.write(t)) == t


def test_content_parts_and_developer_role_are_read():
    trajectory = openai_chat.read(
        [
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Cancel this booking:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        ]
    )
    assert trajectory.messages == [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Cancel this booking:\n[image_url]"),
        Message(role="assistant", content="I can't help with that."),
    ]


def test_invalid_json_arguments_name_the_message_and_call(load):
    messages = load("airline_chat.json")
    messages[8]["tool_calls"][0]["function"]["arguments"] = '{"reservation_id": "59XX6W"'
    with pytest.raises(FormatError, match=rf"message 8: call '{CANCEL_ID}': arguments are not valid JSON"):
        openai_chat.read(messages)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}],
            },
            "must be a JSON object",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "f", "input": "x"}}],
            },
            "unsupported tool call type 'custom'",
        ),
        (
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "missing or empty 'id'",
        ),
        (
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            "legacy 'function_call'",
        ),
        ({"role": "tool", "content": "ok"}, "missing or empty 'tool_call_id'"),
        ({"role": "function", "name": "f", "content": "ok"}, "unknown role 'function'"),
        ({"role": "user", "content": "hi", "tool_calls": [{"id": "c1"}]}, "only assistant messages"),
        ("hello", "expected an object"),
    ],
)
def test_unreadable_messages_raise_naming_the_index(message, error):
    with pytest.raises(FormatError, match=f"message 1: .*{error}"):
        openai_chat.read([{"role": "user", "content": "hi"}, message])


def test_dict_arguments_and_empty_arguments_are_accepted():
    assert openai_chat.tool_call_from_openai(
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    ).arguments == {"a": 1}
    assert openai_chat.tool_call_from_openai({"id": "c2", "function": {"name": "f", "arguments": ""}}).arguments == {}


def test_reads_sdk_objects():
    from openai.types.chat import ChatCompletionMessage

    sdk = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": CANCEL_ID,
                    "type": "function",
                    "function": {"name": "cancel_reservation", "arguments": '{"reservation_id": "59XX6W"}'},
                }
            ],
        }
    )
    trajectory = openai_chat.read([{"role": "user", "content": "yes"}, sdk])
    assert trajectory.messages[1].tool_calls == [
        ToolCall(id=CANCEL_ID, name="cancel_reservation", arguments={"reservation_id": "59XX6W"})
    ]


def test_tool_error_message_answers_the_blocked_call_as_a_failure():
    blocked = openai_chat.tool_error_message(CANCEL_ID, "Ask the user for the reason for cancellation first.")
    assert blocked == {
        "role": "tool",
        "tool_call_id": CANCEL_ID,
        "content": "Error: Ask the user for the reason for cancellation first.",
    }
    message = openai_chat.read_message(blocked, 0)
    assert (message.tool_call_id, message.is_error) == (CANCEL_ID, True)


def test_a_failed_result_is_written_with_the_error_prefix_and_reads_back_as_failed():
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="f")]),
            Message(role="tool", tool_call_id="c1", content="boom", is_error=True),
        ]
    )
    written = openai_chat.write(trajectory)
    assert written[1] == {"role": "tool", "tool_call_id": "c1", "content": "Error: boom"}
    assert json.loads(written[0]["tool_calls"][0]["function"]["arguments"]) == {}
    [result] = openai_chat.read(written).tool_results()
    assert result.is_error and result.content == "Error: boom"
