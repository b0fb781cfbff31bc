"""What every reader refuses: reused call ids, guessed error flags, arguments outside the limits.

The three readers (OpenAI Chat, OpenAI Responses, Anthropic) are driven through
one small builder per format, so each rule is stated once and checked in all
three. A refusal is a FormatError naming the message (or item) indexes and the
call id; a failed tool result is read as ``is_error=True`` wherever the input
says so.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from policyguard.errors import FormatError
from policyguard.trajectory.formats import from_trajectory, to_trajectory
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

FORMATS = ["openai_chat", "openai_responses", "anthropic"]


def _get(reservation: str) -> dict[str, Any]:
    return {"name": "get_reservation_details", "arguments": {"reservation_id": reservation}}


def calls(fmt: str, *specs: tuple[str, dict[str, Any]], raw_arguments: str | None = None) -> list[dict[str, Any]]:
    """One assistant turn calling ``(call_id, {"name", "arguments"})`` for each spec, in ``fmt``."""
    if fmt == "openai_chat":
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": spec["name"], "arguments": raw_arguments or json.dumps(spec["arguments"])},
            }
            for call_id, spec in specs
        ]
        return [{"role": "assistant", "content": None, "tool_calls": tool_calls}]
    if fmt == "openai_responses":
        return [
            {
                "type": "function_call",
                "call_id": call_id,
                "name": spec["name"],
                "arguments": raw_arguments or json.dumps(spec["arguments"]),
            }
            for call_id, spec in specs
        ]
    blocks = [
        {"type": "tool_use", "id": call_id, "name": spec["name"], "input": spec["arguments"]} for call_id, spec in specs
    ]
    return [{"role": "assistant", "content": blocks}]


def results(fmt: str, *answers: tuple[str, str], **flags: Any) -> list[dict[str, Any]]:
    """The tool results ``(call_id, text)`` in ``fmt``; ``flags`` are added to each result as given."""
    if fmt == "openai_chat":
        return [{"role": "tool", "tool_call_id": call_id, "content": text, **flags} for call_id, text in answers]
    if fmt == "openai_responses":
        return [
            {"type": "function_call_output", "call_id": call_id, "output": text, **flags} for call_id, text in answers
        ]
    blocks = [{"type": "tool_result", "tool_use_id": call_id, "content": text, **flags} for call_id, text in answers]
    return [{"role": "user", "content": blocks}]


def user(fmt: str, text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def read(fmt: str, messages: list[dict[str, Any]]) -> Trajectory:
    return to_trajectory(messages, format=fmt)  # type: ignore[arg-type]


NO6JO3 = json.dumps({"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "status": "active"})
T1QOBS = json.dumps({"reservation_id": "T1QOBS", "user_id": "other_user", "status": "active"})


# -- duplicate call ids -------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_reads_with_one_call_id_in_one_assistant_turn_are_refused(fmt):
    """Pairing by id cannot tell NO6JO3's result from T1QOBS's: refuse, never pair by position."""
    messages = [
        *user(fmt, "cancel T1QOBS"),
        *calls(fmt, ("call_1", _get("NO6JO3")), ("call_1", _get("T1QOBS"))),
        *results(fmt, ("call_1", NO6JO3)),
    ]
    label = "item" if fmt == "openai_responses" else "message"
    first, second = (1, 2) if fmt == "openai_responses" else (1, 1)
    with pytest.raises(FormatError, match=rf"{label} {second}: call id 'call_1' is used by two calls") as raised:
        read(fmt, messages)
    assert f"{label} {first}" in str(raised.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_call_id_reused_by_a_later_turn_before_it_is_answered_is_refused_naming_both_messages(fmt):
    messages = [
        *calls(fmt, ("call_1", _get("NO6JO3"))),
        *calls(fmt, ("call_1", _get("T1QOBS"))),
        *results(fmt, ("call_1", NO6JO3)),
    ]
    label = "item" if fmt == "openai_responses" else "message"
    with pytest.raises(
        FormatError,
        match=rf"{label} 1: call id 'call_1' is used by two calls before the first is answered \(in {label} 0 and {label} 1\)",
    ):
        read(fmt, messages)


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_call_id_reused_after_it_was_answered_pairs_each_result_with_its_own_call(fmt):
    messages = [
        *calls(fmt, ("call_1", _get("NO6JO3"))),
        *results(fmt, ("call_1", NO6JO3)),
        *calls(fmt, ("call_1", _get("T1QOBS"))),
    ]
    sites = read(fmt, messages).call_sites()
    assert [s.call.arguments["reservation_id"] for s in sites] == ["NO6JO3", "T1QOBS"]
    assert sites[0].result is not None and sites[1].result is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_results_for_one_call_id_are_refused_naming_both_messages(fmt):
    messages = [
        *calls(fmt, ("call_1", _get("T1QOBS"))),
        *results(fmt, ("call_1", NO6JO3)),
        *user(fmt, "go on"),
        *results(fmt, ("call_1", T1QOBS)),
    ]
    label = "item" if fmt == "openai_responses" else "message"
    with pytest.raises(
        FormatError, match=rf"{label} 3: call id 'call_1' is answered by two results \(in {label} 1 and {label} 3\)"
    ):
        read(fmt, messages)


@pytest.mark.parametrize("fmt", FORMATS)
def test_distinct_call_ids_still_pair_each_result_with_its_own_call(fmt):
    messages = [
        *calls(fmt, ("call_1", _get("NO6JO3")), ("call_2", _get("T1QOBS"))),
        *results(fmt, ("call_1", NO6JO3), ("call_2", T1QOBS)),
    ]
    pairs = [
        (r.call.arguments["reservation_id"], json.loads(r.content)["reservation_id"])
        for r in read(fmt, messages).tool_results()
    ]
    assert pairs == [("NO6JO3", "NO6JO3"), ("T1QOBS", "T1QOBS")]


def test_anthropic_two_results_for_one_id_in_one_user_message_are_refused():
    messages = [
        *calls("anthropic", ("call_1", _get("T1QOBS"))),
        *results("anthropic", ("call_1", NO6JO3), ("call_1", T1QOBS)),
    ]
    with pytest.raises(FormatError, match=r"message 1: call id 'call_1' is answered by two results \(in message 1\)"):
        read("anthropic", messages)


# -- error flags --------------------------------------------------------------

FAILED = "Error: Reservation T1QOBS not found"


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_error_text_result_is_a_failed_read_in_every_format(fmt):
    """tau2 and GuardedTools mark failures with "Error: ..."; litellm drops Anthropic's flag on the way."""
    messages = [*calls(fmt, ("call_1", _get("T1QOBS"))), *results(fmt, ("call_1", FAILED))]
    [result] = read(fmt, messages).tool_results()
    assert result.is_error


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_explicit_true_is_error_flag_is_a_failed_read_in_every_format(fmt):
    messages = [*calls(fmt, ("call_1", _get("T1QOBS"))), *results(fmt, ("call_1", T1QOBS), is_error=True)]
    [result] = read(fmt, messages).tool_results()
    assert result.is_error


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("flag", ["false", "true", 0, 1, 0.0, [], {}, "yes"])
def test_an_error_flag_that_is_not_a_bool_is_refused_not_guessed(fmt, flag):
    """Anthropic ``is_error: "false"`` is truthy in Python; a guessed flag decides whether a read is a fact."""
    messages = [*calls(fmt, ("call_1", _get("T1QOBS"))), *results(fmt, ("call_1", T1QOBS), is_error=flag)]
    with pytest.raises(FormatError, match=r"'is_error' must be true or false"):
        read(fmt, messages)


@pytest.mark.parametrize("fmt", FORMATS)
def test_false_and_absent_flags_on_a_json_result_are_a_successful_read(fmt):
    for flags in ({}, {"is_error": False}):
        messages = [*calls(fmt, ("call_1", _get("T1QOBS"))), *results(fmt, ("call_1", T1QOBS), **flags)]
        [result] = read(fmt, messages).tool_results()
        assert not result.is_error


@pytest.mark.parametrize(("status", "failed"), [("completed", False), ("incomplete", True), ("in_progress", True)])
def test_responses_output_status_other_than_completed_is_a_failed_read(status, failed):
    messages = [
        *calls("openai_responses", ("c", _get("T1QOBS"))),
        *results("openai_responses", ("c", T1QOBS), status=status),
    ]
    [result] = read("openai_responses", messages).tool_results()
    assert result.is_error is failed


@pytest.mark.parametrize("status", ["failed", "COMPLETED", 1, True])
def test_responses_output_status_outside_the_api_values_is_refused(status):
    messages = [
        *calls("openai_responses", ("c", _get("T1QOBS"))),
        *results("openai_responses", ("c", T1QOBS), status=status),
    ]
    with pytest.raises(FormatError, match=r"item 1: 'status' must be one of completed, incomplete, in_progress"):
        read("openai_responses", messages)


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("content", ["not found", FAILED, ""])
def test_writers_round_trip_the_error_flag(target, content):
    call = ToolCall(id="call_1", name="get_reservation_details", arguments={"reservation_id": "T1QOBS"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="call_1", content=content, is_error=True),
            Message(role="assistant", tool_calls=[call.model_copy(update={"id": "call_2"})]),
            Message(role="tool", tool_call_id="call_2", content=T1QOBS),
        ]
    )
    back = to_trajectory(from_trajectory(trajectory, target), format=target)  # type: ignore[arg-type]
    assert [r.is_error for r in back.tool_results()] == [True, False]
    assert back.messages[1].content.endswith(content)  # type: ignore[union-attr]


# -- arguments outside the limits ----------------------------------------------

BAD_ARGUMENTS = [
    ('{"reservation_id": "T1QOBS", "amount": NaN}', "amount", "nan"),
    ('{"amount": Infinity}', "amount", "inf"),
    ('{"amount": -Infinity}', "amount", "-inf"),
    ('{"amount": 1e999}', "amount", "inf"),
    ('{"nonfree_baggages": 18446744073709551617}', "nonfree_baggages", "64-bit"),
    ('{"items": [1, 2, {"price": NaN}]}', r"items\[2\].price", "nan"),
    ('{"deep": ' + "[" * 100 + "]" * 100 + "}", "deeper than 64", ""),
    ('{"deep": ' + "[" * 5000 + "]" * 5000 + "}", "deeper than 64", ""),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("raw", "argument", "why"), BAD_ARGUMENTS)
def test_arguments_outside_the_limits_are_refused_naming_message_call_and_argument(fmt, raw, argument, why):
    if fmt == "anthropic":
        try:
            arguments = json.loads(raw)
        except RecursionError:
            pytest.skip("Python cannot build this input as objects either")
        spec = {"name": "update_reservation_baggages", "arguments": arguments}
        messages = [*user(fmt, "hi"), *calls(fmt, ("call_9", spec))]
        if raw.count("[") >= sys.getrecursionlimit():  # Python 3.13 builds it, but no reader can walk it
            with pytest.raises(FormatError, match="the input is nested too deeply to read"):
                read(fmt, messages)
            return
    else:
        spec = {"name": "update_reservation_baggages", "arguments": {}}
        messages = [*user(fmt, "hi"), *calls(fmt, ("call_9", spec), raw_arguments=raw)]
    label = "item" if fmt == "openai_responses" else "message"
    with pytest.raises(FormatError, match=rf"{label} 1.*call 'call_9'.*{argument}.*{why}"):
        read(fmt, messages)


def test_deep_sdk_like_input_is_a_format_error_not_a_recursion_error():
    nested: Any = "x"
    for _ in range(5000):
        nested = [nested]
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi", "extra": nested}]}]
    with pytest.raises(FormatError, match="nested too deeply"):
        to_trajectory(messages, format="anthropic")
