"""The incremental Chat converter never judges a changed history on a stale conversion.

Property: after any sequence of appends and in-place edits of earlier messages,
``ChatHistory.convert(messages)`` gives exactly what a fresh
``openai_chat.read(messages)`` gives, or both refuse.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from policyguard.errors import FormatError
from policyguard.trajectory.formats import openai_chat
from policyguard.trajectory.formats.chat_history import ChatHistory

IDS = st.sampled_from(["c1", "c2", "c3", "c4", "c5", "c6"])
VALUES = st.sampled_from([1, 1.0, True, 0, False, "1", None, 2])


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "tool"]))
    if kind == "user":
        return {"role": "user", "content": draw(st.sampled_from(["hi", "yes", "cancel it"]))}
    if kind == "assistant":
        arguments = {"n": draw(VALUES)}
        raw: Any = arguments if draw(st.booleans()) else json.dumps(arguments)
        call = {"id": draw(IDS), "type": "function", "function": {"name": "f", "arguments": raw}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    tool: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": draw(IDS),
        "content": draw(st.sampled_from(["{}", "Error: x"])),
    }
    if draw(st.booleans()):
        tool["is_error"] = draw(VALUES)
    return tool


def edit(messages: list[dict[str, Any]], index: int, value: Any) -> None:
    """Change one earlier message in place, keeping its identity (what a caller's code might do)."""
    target = messages[index % len(messages)]
    if target["role"] == "tool":
        target["is_error"] = value
    elif target["role"] == "assistant":
        function = target["tool_calls"][0]["function"]
        function["arguments"] = {"n": value} if isinstance(function["arguments"], dict) else json.dumps({"n": value})
    else:
        target["content"] = f"edited {value!r}"


def fresh(messages: list[dict[str, Any]]) -> Any:
    try:
        return [m.model_dump_json() for m in openai_chat.read(copy.deepcopy(messages)).messages]
    except FormatError:
        return "refused"


def incremental(history: ChatHistory, messages: list[dict[str, Any]]) -> Any:
    try:
        return [m.model_dump_json() for m in history.convert(messages).messages]  # JSON: 1, 1.0 and True differ
    except FormatError:
        return "refused"


TOOL_FALSE = {"role": "tool", "tool_call_id": "c1", "content": "{}", "is_error": False}
DICT_ARGS = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"n": 1}}}]}


@settings(max_examples=200, deadline=None)
@example(start=[TOOL_FALSE], steps=[("edit", (0, 0))])  # False -> 0: equal in Python, refused when read
@example(start=[DICT_ARGS], steps=[("edit", (0, True))])  # 1 -> True: equal in Python, another argument
@given(
    start=st.lists(message(), max_size=6),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), message()),
            st.tuples(st.just("edit"), st.tuples(st.integers(0, 20), VALUES)),
            st.tuples(st.just("truncate"), st.integers(0, 20)),
        ),
        max_size=8,
    ),
)
def test_incremental_conversion_equals_a_fresh_read_after_any_edit(start, steps):
    messages = copy.deepcopy(start)
    history = ChatHistory()
    assert incremental(history, messages) == fresh(messages)
    for action, argument in steps:
        if action == "append":
            messages.append(argument)
        elif action == "edit" and messages:
            edit(messages, *argument)
        elif action == "truncate":
            del messages[argument:]
        assert incremental(history, messages) == fresh(messages)
