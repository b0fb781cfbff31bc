"""OpenAI Responses items <-> Trajectory."""

from __future__ import annotations

import pytest

from policyguard.errors import FormatError
from policyguard.trajectory.formats import openai_responses
from policyguard.trajectory.messages import Message, ToolCall

LOOKUP_ID = "call_kT3pV8sQ2mX9wL4nB7cF1hJ5"
CANCEL_ID = "call_Z6yR2dG8tN4vP1qK9mW3xS7b"


def test_reads_api_items_dropping_reasoning(load):
    trajectory = openai_responses.read(load("airline_responses.json"))

    roles = [m.role for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]
    assert trajectory.messages[1].content.startswith("Hi, I need to cancel my reservation 59XX6W")
    assert trajectory.messages[2] == Message(
        role="assistant",
        tool_calls=[ToolCall(id=LOOKUP_ID, name="get_reservation_details", arguments={"reservation_id": "59XX6W"})],
    )
    assert trajectory.messages[4].content.startswith("I found reservation 59XX6W")
    assert trajectory.messages[-1].tool_calls[0].id == CANCEL_ID
    [result] = trajectory.tool_results()
    assert result.call.id == LOOKUP_ID and result.json()["reservation_id"] == "59XX6W"


def test_api_items_read_like_their_canonical_form(load):
    assert openai_responses.read(load("airline_responses.json")) == openai_responses.read(
        load("airline_responses_canonical.json")
    )


def test_canonical_items_round_trip(load):
    original = load("airline_responses_canonical.json")
    assert openai_responses.write(openai_responses.read(original)) == original


def test_trajectory_round_trips(load):
    trajectory = openai_responses.read(load("airline_responses.json"))
    assert openai_responses.read(openai_responses.write(trajectory)) == trajectory


def test_function_calls_join_the_assistant_text_before_them():
    trajectory = openai_responses.read(
        [
            {"role": "user", "content": "Look up 59XX6W and XEHM4B."},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "reasoning", "summary": []},
            {
                "type": "function_call",
                "call_id": "a",
                "name": "get_reservation_details",
                "arguments": '{"reservation_id":"59XX6W"}',
            },
            {
                "type": "function_call",
                "call_id": "b",
                "name": "get_reservation_details",
                "arguments": '{"reservation_id":"XEHM4B"}',
            },
            {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "{}"}]},
            {"type": "function_call_output", "call_id": "b", "output": "{}"},
        ]
    )
    assistant = trajectory.messages[1]
    assert assistant.content == "Looking."
    assert [c.id for c in assistant.tool_calls] == ["a", "b"]
    assert [(m.role, m.tool_call_id, m.content) for m in trajectory.messages[2:]] == [
        ("tool", "a", "{}"),
        ("tool", "b", "{}"),
    ]
    assert openai_responses.write(trajectory)[1:4] == [
        {"role": "assistant", "content": "Looking."},
        {
            "type": "function_call",
            "call_id": "a",
            "name": "get_reservation_details",
            "arguments": '{"reservation_id": "59XX6W"}',
        },
        {
            "type": "function_call",
            "call_id": "b",
            "name": "get_reservation_details",
            "arguments": '{"reservation_id": "XEHM4B"}',
        },
    ]


def test_a_bare_string_is_one_user_turn():
    assert openai_responses.read("Cancel 59XX6W").messages == [Message(role="user", content="Cancel 59XX6W")]


def test_invalid_json_arguments_name_the_item_and_call(load):
    items = load("airline_responses.json")
    items[11]["arguments"] = "{reservation_id: 59XX6W}"
    with pytest.raises(FormatError, match=rf"item 11: call '{CANCEL_ID}': arguments are not valid JSON"):
        openai_responses.read(items)


@pytest.mark.parametrize(
    ("item", "error"),
    [
        ({"type": "web_search_call", "id": "ws_1", "status": "completed"}, "unsupported item type 'web_search_call'"),
        ({"type": "item_reference", "id": "fc_1"}, "unsupported item type 'item_reference'"),
        ({"type": "function_call", "name": "f", "arguments": "{}"}, "missing or empty 'call_id'"),
        ({"type": "function_call_output", "output": "ok"}, "missing or empty 'call_id'"),
        ({"role": "tool", "content": "ok"}, "unknown role 'tool'"),
        ({"content": "no role"}, "unsupported item type None"),
    ],
)
def test_unreadable_items_raise_naming_the_index(item, error):
    with pytest.raises(FormatError, match=f"item 1: {error}"):
        openai_responses.read([{"role": "user", "content": "hi"}, item])


def test_reads_sdk_output_items():
    from openai.types.responses import ResponseFunctionToolCall, ResponseReasoningItem

    items = [
        {"role": "user", "content": "yes"},
        ResponseReasoningItem(id="rs_1", type="reasoning", summary=[]),
        ResponseFunctionToolCall(
            id="fc_1",
            type="function_call",
            call_id=CANCEL_ID,
            name="cancel_reservation",
            arguments='{"reservation_id":"59XX6W"}',
            status="completed",
        ),
    ]
    trajectory = openai_responses.read(items)
    assert trajectory.messages[-1].tool_calls == [
        ToolCall(id=CANCEL_ID, name="cancel_reservation", arguments={"reservation_id": "59XX6W"})
    ]


def test_tool_error_message_answers_the_blocked_call_as_a_failure():
    blocked = openai_responses.tool_error_message(CANCEL_ID, "Get explicit confirmation first.")
    assert blocked == {
        "type": "function_call_output",
        "call_id": CANCEL_ID,
        "output": "Error: Get explicit confirmation first.",
    }
    call = {"type": "function_call", "call_id": CANCEL_ID, "name": "cancel_reservation", "arguments": "{}"}
    [_, result] = openai_responses.read([call, blocked]).messages
    assert (result.role, result.tool_call_id, result.is_error) == ("tool", CANCEL_ID, True)
