"""Format detection and the package-level API: to_trajectory, from_trajectory and helpers."""

from __future__ import annotations

import pytest

import policyguard.trajectory.formats as formats
from policyguard.errors import FormatError
from policyguard.trajectory.formats import detect_format, from_trajectory, to_trajectory
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

FIXTURES = {
    "airline_chat.json": "openai_chat",
    "airline_responses.json": "openai_responses",
    "airline_responses_canonical.json": "openai_responses",
    "airline_anthropic.json": "anthropic",
    "anthropic_parallel.json": "anthropic",
}


@pytest.mark.parametrize(("name", "expected"), FIXTURES.items())
def test_detects_each_fixture(load, name, expected):
    assert detect_format(load(name)) == expected
    assert to_trajectory(load(name)) == to_trajectory(load(name), format=expected)


def test_detects_a_bare_anthropic_message_list(load):
    assert detect_format(load("airline_anthropic.json")["messages"]) == "anthropic"


def _shape(trajectory: Trajectory) -> list[tuple]:
    """The dialogue without provider-specific call ids."""
    return [
        (m.role, m.content, [(c.name, c.arguments) for c in m.tool_calls], m.tool_call_id is not None, m.is_error)
        for m in trajectory.messages
    ]


def test_the_same_conversation_reads_alike_in_every_format(load):
    chat = to_trajectory(load("airline_chat.json"))
    assert _shape(to_trajectory(load("airline_responses.json"))) == _shape(chat)
    assert _shape(to_trajectory(load("airline_anthropic.json"))) == _shape(chat)


@pytest.mark.parametrize("target", ["openai_chat", "openai_responses", "anthropic"])
def test_a_trajectory_survives_conversion_to_each_format(load, target):
    trajectory = to_trajectory(load("airline_chat.json"))
    written = from_trajectory(trajectory, target)
    assert detect_format(written) == target
    assert to_trajectory(written, format=target) == trajectory
    assert to_trajectory(written) == trajectory


def test_anthropic_output_is_a_system_and_messages_dict(load):
    written = from_trajectory(to_trajectory(load("airline_chat.json")), "anthropic")
    assert isinstance(written, dict) and set(written) == {"system", "messages"}
    assert written["system"].startswith("You are a customer service agent")


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        (
            [{"role": "user", "content": "Cancel 59XX6W."}, {"role": "assistant", "content": "Why?"}],
            "read alike as openai_chat, openai_responses, anthropic",
        ),
        (
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            "read alike as openai_chat, openai_responses",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "read alike as openai_chat, anthropic"),
        ([], "empty message list"),
        (
            [
                {"role": "tool", "tool_call_id": "c1", "content": "{}"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "{}"}]},
            ],
            "message 1 fits anthropic but earlier messages fit openai_chat; are formats mixed",
        ),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "tool_result"}]}],
            "message 0 mixes features",
        ),
        ([{"role": "narrator", "content": "hi"}], "message 0: no 'role' or 'type'"),
        (["hello"], "message 0: expected an object"),
        (42, "expected a list of messages, got int"),
        ({"model": "gpt-4o"}, "request object needs 'messages'"),
    ],
)
def test_detection_refuses_to_guess(messages, error):
    with pytest.raises(FormatError, match=error):
        detect_format(messages)


def test_request_bodies_are_detected_and_read(load):
    chat_body = {"model": "gpt-4o", "messages": load("airline_chat.json")}
    responses_body = {"model": "gpt-5", "instructions": "Be brief.", "input": "Cancel 59XX6W."}
    assert detect_format(chat_body) == "openai_chat"
    assert detect_format(responses_body) == "openai_responses"
    assert to_trajectory(chat_body) == to_trajectory(load("airline_chat.json"))
    assert to_trajectory(responses_body).messages == [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Cancel 59XX6W."),
    ]
    plain_anthropic = {"system": "Be brief.", "messages": [{"role": "user", "content": "Cancel 59XX6W."}]}
    assert detect_format(plain_anthropic) == "anthropic"


def test_a_separate_system_prompt(load):
    anthropic_request = load("airline_anthropic.json")
    chat = load("airline_chat.json")
    assert to_trajectory(anthropic_request["messages"], system=anthropic_request["system"]) == to_trajectory(
        anthropic_request
    )
    # Chat keeps system text in the messages: a separate one becomes a leading system message.
    with_system = to_trajectory(chat[1:], system=chat[0]["content"])
    assert with_system == to_trajectory(chat)
    # A plain exchange plus a separate system prompt is Anthropic's shape.
    plain = to_trajectory([{"role": "user", "content": "hi"}], system="Be brief.")
    assert plain.messages == [Message(role="system", content="Be brief."), Message(role="user", content="hi")]
    with pytest.raises(FormatError, match="not both"):
        to_trajectory(anthropic_request, system="again")


def test_empty_list_is_an_empty_trajectory_under_auto():
    assert to_trajectory([]) == Trajectory()


def test_unknown_format_names_raise(load):
    with pytest.raises(FormatError, match="unknown format 'gemini'"):
        to_trajectory(load("airline_chat.json"), format="gemini")  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="unknown format 'auto'"):
        from_trajectory(Trajectory(), "auto")  # type: ignore[arg-type]


def test_explicit_format_that_does_not_fit_raises_naming_the_message(load):
    with pytest.raises(FormatError, match="message 0: unknown role 'system' for anthropic"):
        to_trajectory(load("airline_chat.json"), format="anthropic")


def test_tool_call_from_openai_reads_both_openai_shapes():
    expected = ToolCall(id="call_1", name="cancel_reservation", arguments={"reservation_id": "59XX6W"})
    chat = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "cancel_reservation", "arguments": '{"reservation_id": "59XX6W"}'},
    }
    responses = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "cancel_reservation",
        "arguments": '{"reservation_id":"59XX6W"}',
    }
    assert formats.tool_call_from_openai(chat) == expected
    assert formats.tool_call_from_openai(responses) == expected


@pytest.mark.parametrize("target", ["openai_chat", "openai_responses", "anthropic"])
def test_tool_error_message_reads_back_as_the_error_result_of_the_call(target):
    call = ToolCall(id="call_1", name="cancel_reservation", arguments={"reservation_id": "59XX6W"})
    written = from_trajectory(Trajectory(messages=[Message(role="assistant", tool_calls=[call])]), target)
    blocked = formats.tool_error_message("call_1", "Confirm with the user first.", target)
    if target == "anthropic":
        assert isinstance(written, dict)
        written["messages"].append(blocked)
    else:
        assert isinstance(written, list)
        written.append(blocked)
    [result] = to_trajectory(written, format=target).tool_results()
    assert result.call == call and result.is_error
    assert result.content.endswith("Confirm with the user first.")  # OpenAI formats prefix "Error: "


def test_public_names():
    assert set(formats.__all__) == {
        "FORMATS",
        "Format",
        "FormatName",
        "detect_format",
        "from_trajectory",
        "to_trajectory",
        "tool_call_from_anthropic",
        "tool_call_from_openai",
        "tool_error_message",
    }
    for module in (formats.openai_chat, formats.openai_responses, formats.anthropic):
        assert callable(module.read) and callable(module.write) and callable(module.tool_error_message)
    assert callable(formats.openai_chat.tool_call_from_openai)
    assert callable(formats.openai_responses.tool_call_from_openai)
    assert callable(formats.anthropic.tool_call_from_anthropic)
