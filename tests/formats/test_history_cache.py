"""A conversation's history converted once per message gives exactly what converting it whole gives.

Property: after any sequence of appends, in-place edits, truncations and
replacements of the lists sent under a few conversation keys,
``HistoryCache.convert(key, messages, format)`` returns the same trajectory as
``to_trajectory(messages, format)`` (its calls paired with their results the
same way too), or raises the same error with the same message. Lists the
cache does not keep (another format, a separate system prompt, too heavy) are
converted whole.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from policyguard.errors import FormatError
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.formats.history_cache import HistoryCache
from policyguard.trajectory.messages import DuplicateCallId, Message, ToolCall


class Part(BaseModel):
    type: str
    text: str


IDS = st.sampled_from(["c1", "c2", "c3", "c4"])
ARGUMENTS = st.sampled_from(['{"n": 1}', '{"n": 1.0}', "{", '{"n": NaN}', '{"n": 1e999}', "[1]", "", {"n": True}])


@st.composite
def message(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["user", "assistant", "tool", "system", "responses", "anthropic", "bad", "ours"]))
    if kind in ("user", "system"):
        content = draw(st.sampled_from(["hi", "yes", "cancel it", "part", "sdk part"]))
        if content == "part":
            return {"role": kind, "content": [{"type": "text", "text": "hi"}]}
        if content == "sdk part":  # an SDK object inside a plain message: detection must see its type
            return {"role": kind, "content": [Part(type=draw(st.sampled_from(["text", "input_text"])), text="hi")]}
        return {"role": kind, "content": content}
    if kind == "assistant":
        calls = [
            {"id": draw(IDS), "type": "function", "function": {"name": "f", "arguments": draw(ARGUMENTS)}}
            for _ in range(draw(st.integers(1, 2)))
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    if kind == "tool":
        tool: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": draw(IDS),
            "content": draw(st.sampled_from(["{}", "Error: x"])),
        }
        if draw(st.booleans()):
            tool["is_error"] = draw(st.sampled_from([True, False, 0, "false"]))
        return tool
    if kind == "responses":
        return {"type": "function_call", "call_id": draw(IDS), "name": "f", "arguments": "{}"}
    if kind == "anthropic":
        return {"role": "assistant", "content": [{"type": "tool_use", "id": draw(IDS), "name": "f", "input": {}}]}
    if kind == "ours":  # the package's own Message among provider dicts: read as its fields, the same either way
        return draw(
            st.sampled_from(
                [
                    Message(role="user", content="hi"),
                    Message(role="assistant", tool_calls=[ToolCall(id="c1", name="f", arguments={"n": 1})]),
                    Message(role="tool", tool_call_id="c1", content="{}"),
                ]
            )
        )
    return draw(st.sampled_from([{"role": "robot", "content": "x"}, "not a message", {"content": "no role"}]))


def outcome(convert: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        trajectory = convert(*args, **kwargs)
    except FormatError as exc:
        return ("refused", str(exc))
    try:  # the pairing a converted list carries, or the one made for it now: the same
        sites: Any = [(s.call.id, s.order, s.result and s.result.model_dump_json()) for s in trajectory.call_sites()]
    except DuplicateCallId as exc:
        sites = ("ambiguous", str(exc))
    return [m.model_dump_json() for m in trajectory.messages], sites  # JSON: 1, 1.0 and True differ


STEP = st.one_of(
    st.tuples(st.just("append"), message()),
    st.tuples(st.just("edit"), st.tuples(st.integers(0, 20), message())),
    st.tuples(st.just("truncate"), st.integers(0, 20)),
    st.tuples(st.just("switch"), st.integers(0, 2)),
)


@settings(max_examples=300, deadline=None)
@given(
    start=st.lists(message(), max_size=5),
    steps=st.lists(STEP, max_size=10),
    format=st.sampled_from(["auto", "openai_chat"]),
)
def test_a_cached_conversion_equals_converting_the_whole_list(start, steps, format):
    cache = HistoryCache(max_entries=2)
    lists = [copy.deepcopy(start), copy.deepcopy(start), []]
    key = 0
    for action, argument in [("switch", 0), *steps]:
        messages = lists[key]
        if action == "append":
            messages.append(copy.deepcopy(argument))
        elif action == "edit" and messages:
            index, replacement = argument
            messages[index % len(messages)] = copy.deepcopy(replacement)
        elif action == "truncate":
            del messages[argument:]
        elif action == "switch":
            key = argument
            messages = lists[key]
        sent = copy.deepcopy(messages)  # what a server parses from each request: new objects every time
        got = outcome(cache.convert, f"s{key}", sent, format, weight=len(json.dumps(sent, default=str)))
        assert got == outcome(to_trajectory, copy.deepcopy(messages), format)


CHAT = [
    {"role": "user", "content": "cancel it"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"id": "A"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"id": "A"}'},
]  # fmt: skip


def test_a_conversation_keeps_one_entry_and_an_earlier_message_changed_is_read_again():
    cache = HistoryCache()
    first = cache.convert("s", copy.deepcopy(CHAT))
    changed = copy.deepcopy(CHAT)
    changed[2]["content"] = '{"id": "B"}'
    second = cache.convert("s", changed + [{"role": "user", "content": "and now?"}])
    assert len(cache) == 1
    assert first.messages[2].content == '{"id": "A"}' and second.messages[2].content == '{"id": "B"}'


def test_a_refused_list_drops_its_conversation_entry():
    cache = HistoryCache()
    cache.convert("s", copy.deepcopy(CHAT))
    answered_twice = copy.deepcopy(CHAT) + [copy.deepcopy(CHAT[2])]
    with pytest.raises(FormatError, match="answered by two results"):
        cache.convert("s", answered_twice)
    assert len(cache) == 0


def test_the_cache_is_bounded_by_entries_and_weight_and_skips_heavy_lists():
    cache = HistoryCache(max_entries=2, max_weight=1000)
    for key in ("a", "b", "c"):
        cache.convert(key, copy.deepcopy(CHAT), weight=10)
    assert len(cache) == 2
    cache.convert("d", copy.deepcopy(CHAT), weight=400)
    cache.convert("e", copy.deepcopy(CHAT), weight=400)
    assert len(cache) == 2  # 10 + 400 + 400 is over 1000: the oldest went
    cache.convert("f", copy.deepcopy(CHAT), weight=251)  # over a quarter of the budget: converted, not kept
    assert len(cache) == 2


def test_lists_the_cache_does_not_keep_are_converted_whole():
    cache = HistoryCache()
    anthropic = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert cache.convert("s", anthropic, "anthropic").messages[0].content == "hi"
    assert cache.convert("s", copy.deepcopy(CHAT), system="be brief").messages[0].role == "system"
    assert len(cache) == 0


def test_a_conversation_whose_conversion_failed_is_not_read_by_a_check_that_was_waiting_for_it():
    """Two checks of one conversation at once: the first one's list is refused half-way (its call c9 already
    registered); the second, which took the same entry and waited for it, converts its own list whole."""
    cache = HistoryCache()
    cache.convert("s", copy.deepcopy(CHAT))
    entry = cache._entries["s"]
    twice = {"id": "c9", "type": "function", "function": {"name": "get", "arguments": "{}"}}
    with pytest.raises(FormatError, match="used by two calls"):
        cache.convert("s", [*copy.deepcopy(CHAT), {"role": "assistant", "content": None, "tool_calls": [twice, twice]}])
    cache._take = lambda key, format: entry  # type: ignore[method-assign]  # what the waiting check holds
    once = [*copy.deepcopy(CHAT), {"role": "assistant", "content": None, "tool_calls": [twice]}]
    assert outcome(cache.convert, "s", once, weight=1) == outcome(to_trajectory, copy.deepcopy(once))
