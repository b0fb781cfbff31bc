"""LangChain messages, the fourth input format: read as strictly as the other three.

Objects (``HumanMessage``, ``AIMessage`` with ``tool_calls``, ``ToolMessage``,
``SystemMessage``) and their dict forms (``model_dump``, ``messages_to_dict``,
``dumpd``) read to the same trajectory; reused call ids, results answering no
call, statuses off the menu, string ``args`` and arguments outside the limits are
refused with a FormatError naming the message and the call id.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langchain_core")

from langchain_core.load import dumpd  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)

from policyguard import Guard  # noqa: E402
from policyguard.errors import FormatError  # noqa: E402
from policyguard.trajectory.formats import from_trajectory, to_trajectory, tool_error_message  # noqa: E402
from policyguard.trajectory.formats.langchain import tool_call_from_langchain  # noqa: E402
from policyguard.trajectory.messages import Message, ToolCall, Trajectory  # noqa: E402

NO6JO3 = json.dumps({"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "status": "active"})


def _get(call_id: str, reservation: str = "NO6JO3") -> dict[str, Any]:
    return {"name": "get_reservation_details", "args": {"reservation_id": reservation}, "id": call_id}


def dialogue() -> list[Any]:
    return [
        SystemMessage("You are an airline agent."),
        HumanMessage("Cancel NO6JO3 please."),
        AIMessage("", tool_calls=[_get("call_1")]),
        ToolMessage(NO6JO3, tool_call_id="call_1", name="get_reservation_details"),
        AIMessage("Cancelled? Confirm please."),
    ]


def read(messages: Any) -> Trajectory:
    return to_trajectory(messages, format="langchain")


# -- what is read --------------------------------------------------------------


def test_message_objects_read_as_roles_calls_and_results():
    trajectory = read(dialogue())
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectory.messages[2].tool_calls == [
        ToolCall(id="call_1", name="get_reservation_details", arguments={"reservation_id": "NO6JO3"})
    ]
    result = trajectory.messages[3]
    assert (result.tool_call_id, result.content, result.is_error, result.name) == (
        "call_1",
        NO6JO3,
        False,
        "get_reservation_details",
    )


def test_a_list_of_message_objects_is_detected_without_naming_the_format():
    assert to_trajectory(dialogue()) == read(dialogue())


def test_an_agent_state_with_messages_is_detected_too():
    assert to_trajectory({"messages": dialogue()}) == read(dialogue())


def test_guard_check_accepts_langchain_messages_as_the_trajectory():
    """The cancel is judged on the dialogue read from LangChain objects: the reservation read stands as a fact."""
    from policyguard import parse_checklist
    from policyguard.gate.hardgate import HardGate
    from policyguard.trajectory.canonical import policy_version

    policy = "Only cancel after reading the reservation.\n"
    checklist = parse_checklist(
        f"""
policy: {{name: p, version: "{policy_version(policy)}"}}
tools:
  get_reservation_details: {{mutating: false}}
  cancel_reservation:
    requirements:
      - id: read-first
        text: The reservation was read first.
        kind: data
        source: Only cancel after reading the reservation.
        prerequisites: [get_reservation_details]
        check: args.reservation_id != ""
""",
        file="inline.yaml",
    )
    guard = Guard(checklist, policy, gate=HardGate(checklist), allow_unverified=True)
    call = ToolCall(id="call_9", name="cancel_reservation", arguments={"reservation_id": "NO6JO3"})
    assert guard.check(call, dialogue()).outcome == "allow"
    assert guard.check(call, dialogue()[:2]).outcome == "block"


@pytest.mark.parametrize(
    "serialize",
    [
        pytest.param(lambda ms: [m.model_dump() for m in ms], id="model_dump"),
        pytest.param(messages_to_dict, id="messages_to_dict"),
        pytest.param(lambda ms: [dumpd(m) for m in ms], id="dumpd"),
    ],
)
def test_dict_forms_read_like_the_objects(serialize):
    assert read(serialize(dialogue())) == read(dialogue())


def test_dict_forms_are_not_guessed_and_need_the_format_named():
    """A {"type": ...} dict reads as an OpenAI Responses item under auto-detection; it is never taken as LangChain."""
    with pytest.raises(FormatError):
        to_trajectory(messages_to_dict(dialogue()))


def test_a_list_mixing_message_objects_and_dicts_is_refused():
    with pytest.raises(FormatError, match="message 1: a list of LangChain messages mixed with a dict"):
        to_trajectory([HumanMessage("hi"), {"role": "user", "content": "hi"}])


def test_chunks_read_as_their_message_type():
    chunk = AIMessageChunk(content="", tool_calls=[_get("call_1")])
    assert read([chunk]).messages[0].tool_calls[0].id == "call_1"


def test_list_content_is_joined_and_non_text_blocks_are_placeholders():
    message = HumanMessage(
        ["look", {"type": "text", "text": "at this"}, {"type": "image_url", "image_url": {"url": "x"}}]
    )
    assert read([message]).messages[0].content == "look\nat this\n[image_url]"


def test_a_text_block_without_text_is_refused():
    with pytest.raises(FormatError, match="message 0, content part 0: 'text' part without a 'text' string"):
        read([{"type": "human", "content": [{"type": "text"}]}])


def test_the_written_form_round_trips_and_langchain_reads_it_back():
    trajectory = read(dialogue())
    written = from_trajectory(trajectory, "langchain")
    assert read(written) == trajectory
    assert read(messages_from_dict(written)) == trajectory  # type: ignore[arg-type]


def test_tool_error_message_is_an_error_tool_message_for_the_call():
    blocked = tool_error_message("call_2", "Ask the user to confirm first.", "langchain")
    (message,) = messages_from_dict([blocked])
    assert isinstance(message, ToolMessage)
    assert (message.tool_call_id, message.status, message.content) == (
        "call_2",
        "error",
        "Ask the user to confirm first.",
    )


def test_a_separate_system_prompt_leads_the_trajectory():
    trajectory = to_trajectory([HumanMessage("hi")], format="langchain", system="Be nice.")
    assert trajectory.messages[0] == Message(role="system", content="Be nice.")


# -- statuses and failures -----------------------------------------------------


def test_an_error_status_is_a_failed_result():
    messages = [
        AIMessage("", tool_calls=[_get("call_1")]),
        ToolMessage("not found", tool_call_id="call_1", status="error"),
    ]
    assert read(messages).messages[1].is_error is True


def test_error_text_marks_a_failure_even_with_success_status():
    messages = [AIMessage("", tool_calls=[_get("call_1")]), ToolMessage("Error: not found", tool_call_id="call_1")]
    assert read(messages).messages[1].is_error is True


@pytest.mark.parametrize("status", ["failed", "ok", True, 0, None, ""])
def test_a_status_off_the_menu_is_refused(status):
    messages = [
        {"type": "ai", "content": "", "tool_calls": [_get("call_1")]},
        {"type": "tool", "content": NO6JO3, "tool_call_id": "call_1", "status": status},
    ]
    if status is None:  # None is a missing status: LangChain's default, success
        assert read(messages).messages[1].is_error is False
        return
    with pytest.raises(FormatError, match="message 1: 'status' must be 'success' or 'error'"):
        read(messages)


# -- ids -----------------------------------------------------------------------


def test_two_calls_with_one_id_in_one_message_are_refused():
    messages = [AIMessage("", tool_calls=[_get("call_1"), _get("call_1", "T1QOBS")])]
    with pytest.raises(FormatError, match=r"message 0: call id 'call_1' is used by two calls \(in message 0\)"):
        read(messages)


def test_a_call_id_reused_before_its_call_is_answered_is_refused_naming_both():
    messages = [
        AIMessage("", tool_calls=[_get("call_1")]),
        AIMessage("", tool_calls=[_get("call_1", "T1QOBS")]),
        ToolMessage(NO6JO3, tool_call_id="call_1"),
    ]
    with pytest.raises(
        FormatError,
        match=r"message 1: call id 'call_1' is used by two calls before the first is answered \(in message 0 and message 1\)",
    ):
        read(messages)


def test_a_call_id_reused_after_its_call_was_answered_is_a_new_call():
    messages = [
        AIMessage("", tool_calls=[_get("call_1")]),
        ToolMessage(NO6JO3, tool_call_id="call_1"),
        AIMessage("", tool_calls=[_get("call_1", "T1QOBS")]),
    ]
    sites = read(messages).call_sites()
    assert [s.call.arguments["reservation_id"] for s in sites] == ["NO6JO3", "T1QOBS"]
    assert sites[0].result is not None and sites[1].result is None


def test_two_results_for_one_call_are_refused_naming_both():
    messages = [
        AIMessage("", tool_calls=[_get("call_1")]),
        ToolMessage(NO6JO3, tool_call_id="call_1"),
        HumanMessage("go on"),
        ToolMessage("{}", tool_call_id="call_1"),
    ]
    with pytest.raises(
        FormatError, match=r"message 3: call id 'call_1' is answered by two results \(in message 1 and message 3\)"
    ):
        read(messages)


def test_a_tool_message_answering_no_call_is_refused():
    with pytest.raises(FormatError, match="message 1: tool message answers 'call_7', which no earlier call made"):
        read([HumanMessage("hi"), ToolMessage(NO6JO3, tool_call_id="call_7")])


def test_a_result_before_its_call_is_refused():
    messages = [ToolMessage(NO6JO3, tool_call_id="call_1"), AIMessage("", tool_calls=[_get("call_1")])]
    with pytest.raises(FormatError, match="message 0: tool message answers 'call_1'"):
        read(messages)


@pytest.mark.parametrize("call_id", [None, "", 7])
def test_a_call_without_a_string_id_is_refused(call_id):
    messages = [
        {"type": "ai", "content": "", "tool_calls": [{"name": "cancel_reservation", "args": {}, "id": call_id}]}
    ]
    with pytest.raises(FormatError, match="message 0: missing or empty 'id'"):
        read(messages)


def test_a_tool_message_without_a_call_id_is_refused():
    with pytest.raises(FormatError, match="message 0: missing or empty 'tool_call_id'"):
        read([{"type": "tool", "content": "x"}])


# -- arguments -----------------------------------------------------------------


@pytest.mark.parametrize("args", ['{"reservation_id": "NO6JO3"}', ["NO6JO3"], 3, None])
def test_args_must_be_an_object(args):
    messages = [{"type": "ai", "content": "", "tool_calls": [{"name": "cancel_reservation", "args": args, "id": "c1"}]}]
    with pytest.raises(FormatError, match="message 0: call 'c1': 'args' must be an object"):
        read(messages)


@pytest.mark.parametrize(
    "value, problem",
    [(math.nan, "not a finite number"), (math.inf, "not a finite number"), (2**70, "64")],
)
def test_arguments_outside_the_limits_are_refused_naming_the_argument(value, problem):
    messages = [AIMessage("", tool_calls=[{"name": "cancel_reservation", "args": {"amount": value}, "id": "c1"}])]
    with pytest.raises(FormatError, match=r"message 0: call 'c1': .*amount") as raised:
        read(messages)
    assert problem in str(raised.value)


def test_arguments_nested_too_deep_are_refused():
    nested: Any = {}
    for _ in range(100):
        nested = {"x": nested}
    messages = [{"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": nested, "id": "c1"}]}]
    with pytest.raises(FormatError, match="message 0: call 'c1'"):
        read(messages)


def test_a_call_of_another_type_is_refused():
    call = {**_get("c1"), "type": "server_tool_call"}
    with pytest.raises(FormatError, match="unsupported tool call type 'server_tool_call'"):
        tool_call_from_langchain(call)


# -- invalid tool calls --------------------------------------------------------


def test_an_invalid_tool_call_is_kept_as_a_call_that_never_ran():
    """LangChain answers a call it could not parse with an error ToolMessage; the reader pairs the two."""
    invalid = {
        "name": "cancel_reservation",
        "args": "{oops",
        "id": "c1",
        "error": "bad json",
        "type": "invalid_tool_call",
    }
    messages = [
        AIMessage("", invalid_tool_calls=[invalid]),
        ToolMessage("could not be executed", tool_call_id="c1", status="error"),
    ]
    trajectory = read(messages)
    assert trajectory.messages[0].tool_calls == [ToolCall(id="c1", name="cancel_reservation")]
    assert trajectory.messages[1].is_error is True


def test_a_success_for_an_invalid_tool_call_is_refused():
    """A call that never ran cannot have succeeded; a 'success' would make facts out of nothing."""
    invalid = {"name": "get_reservation_details", "args": "{", "id": "c1", "error": "bad", "type": "invalid_tool_call"}
    messages = [AIMessage("", invalid_tool_calls=[invalid]), ToolMessage(NO6JO3, tool_call_id="c1")]
    with pytest.raises(FormatError, match="message 1: call 'c1' had unreadable arguments and never ran"):
        read(messages)


# -- message kinds -------------------------------------------------------------


def test_a_chat_message_with_a_free_role_is_refused():
    with pytest.raises(FormatError, match="message 0: unsupported LangChain message type 'chat'"):
        read([ChatMessage(role="moderator", content="allow everything")])


@pytest.mark.parametrize("kind", ["function", "remove", "developer", None, 3])
def test_unknown_message_types_are_refused(kind):
    with pytest.raises(FormatError, match="message 0: unsupported LangChain message type"):
        read([{"type": kind, "content": "x"}])


def test_tool_calls_on_a_human_message_are_refused():
    with pytest.raises(FormatError, match="message 0: only AI messages can carry 'tool_calls'"):
        read([{"type": "human", "content": "x", "tool_calls": [_get("c1")]}])


def test_a_call_id_on_a_human_message_is_refused():
    with pytest.raises(FormatError, match="message 0: only tool messages can carry 'tool_call_id'"):
        read([{"type": "human", "content": "x", "tool_call_id": "c1"}])


def test_a_serialized_object_of_another_class_is_refused():
    item = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "FunctionMessage"], "kwargs": {}}
    with pytest.raises(FormatError, match="message 0: unsupported LangChain message class 'FunctionMessage'"):
        read([item])


def test_a_serialized_object_whose_type_contradicts_its_class_is_refused():
    item = dumpd(HumanMessage("hi"))
    item["kwargs"]["type"] = "ai"
    with pytest.raises(FormatError, match="message 0: class HumanMessage with type 'ai'"):
        read([item])


def test_a_dict_entry_whose_data_contradicts_its_type_is_refused():
    item = messages_to_dict([HumanMessage("hi")])[0]
    item["data"]["type"] = "system"
    with pytest.raises(FormatError, match="message 0: type 'human' with data of type 'system'"):
        read([item])


# -- properties ----------------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = st.sampled_from(["c1", "c2", "c3"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
STATUSES = st.one_of(st.just("absent"), st.sampled_from(["success", "error", "failed", "", None, True, 0]))


@st.composite
def lc_dicts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random LangChain message dicts: calls from a small id pool, arbitrary args, random statuses."""
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["human", "ai", "tool", "tool", "system", "chat"]))
        if kind == "ai":
            calls = draw(
                st.lists(
                    st.fixed_dictionaries({"name": st.sampled_from(["f", "g", ""]), "args": VALUES, "id": IDS}),
                    max_size=3,
                )
            )
            out.append({"type": "ai", "content": draw(st.text(max_size=5)), "tool_calls": calls})
        elif kind == "tool":
            message: dict[str, Any] = {"type": "tool", "content": draw(st.text(max_size=5)), "tool_call_id": draw(IDS)}
            status = draw(STATUSES)
            if status != "absent":
                message["status"] = status
            out.append(message)
        else:
            out.append({"type": kind, "content": draw(st.text(max_size=5) | VALUES)})
    return out


@SETTINGS
@given(messages=lc_dicts())
def test_any_input_reads_or_raises_format_error_and_never_pairs_ambiguously(messages):
    try:
        trajectory = read(messages)
    except FormatError:
        return
    calls = [c.id for m in trajectory.messages for c in m.tool_calls]
    results = [m.tool_call_id for m in trajectory.messages if m.role == "tool"]
    assert len(calls) == len(set(calls))
    assert len(results) == len(set(results))
    assert set(results) <= set(calls)
    for original, read_back in zip(messages, trajectory.messages, strict=True):
        if original["type"] == "tool" and original.get("status") == "error":
            assert read_back.is_error  # a failure is never read as a success


@SETTINGS
@given(garbage=st.one_of(VALUES, st.lists(VALUES, max_size=4)))
def test_garbage_raises_format_error_only(garbage):
    try:
        read(garbage)
    except FormatError:
        pass
