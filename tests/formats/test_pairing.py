"""Calls are paired with their results the same way whether a list is paired at once or as it grows.

:class:`~policyguard.trajectory.messages.Pairing` is the one implementation of
the pairing rules. Fed a message at a time (as
:class:`~policyguard.trajectory.formats.chat_history.ChatHistory` converts a
growing list), it gives at every length exactly what the rules, written out
here once more as the reference below, give for the whole list: the same
sites, results, non-error results by tool, unanswered calls and the same first
ambiguity. A snapshot does not change when more messages are fed, and a list
that carries its pairing drops it on any edit, so a stale pairing is never read.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.trajectory.formats.chat_history import ChatHistory
from policyguard.trajectory.messages import (
    CallSite,
    DuplicateCallId,
    Message,
    PairedMessages,
    Pairing,
    ToolCall,
    ToolResult,
    ToolResultsView,
    Trajectory,
    carried,
    last_mention,
    paired,
)


def reference_sites(messages: list[Message]) -> list[CallSite]:
    """The pairing rules, walked over the whole list (the rules as first written, kept as the specification)."""
    sites: list[CallSite] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant":
            for position, call in enumerate(message.tool_calls):
                if call.id in open_calls:
                    raise DuplicateCallId(call.id, "is used by two calls before the first is answered")
                open_calls[call.id] = len(sites)
                answered.discard(call.id)
                sites.append(CallSite(call, (index, position), None))
        elif message.role == "tool" and message.tool_call_id is not None:
            at = open_calls.pop(message.tool_call_id, None)
            if at is None:
                if message.tool_call_id in answered:
                    raise DuplicateCallId(message.tool_call_id, "has two results")
                continue
            answered.add(message.tool_call_id)
            call, order = sites[at].call, sites[at].order
            result = ToolResult(
                call=call, content=message.content or "", is_error=message.is_error, index=index, order=order
            )
            sites[at] = CallSite(call, order, result)
    return sites


def reference(messages: list[Message]) -> Any:
    """Everything a pairing answers, from the reference walk: comparable, or the ambiguity's message."""
    try:
        sites = reference_sites(messages)
    except DuplicateCallId as exc:
        return ("ambiguous", str(exc))
    results = [site.result for site in sites if site.result is not None]
    successes: dict[str, list[ToolResult]] = {}
    for result in results:
        if not result.is_error:
            successes.setdefault(result.call.name, []).append(result)
    ids = {call.id for message in messages for call in message.tool_calls} | {
        message.tool_call_id for message in messages if message.tool_call_id is not None
    }
    unanswered = {i: [site for site in sites if site.call.id == i and site.result is None] for i in sorted(ids)}
    mentioned = {
        i: max(
            (n for n, m in enumerate(messages) if m.tool_call_id == i or any(c.id == i for c in m.tool_calls)),
            default=-1,
        )
        for i in sorted(ids)
    }
    return sites, results, successes, unanswered, mentioned


def answers(view_of: Any, messages: list[Message]) -> Any:
    """The same answers read from a :class:`ToolResultsView` of ``messages`` (a list that may carry its pairing)."""
    try:
        view = view_of(messages)
    except DuplicateCallId as exc:
        return ("ambiguous", str(exc))
    ids = {call.id for message in messages for call in message.tool_calls} | {
        message.tool_call_id for message in messages if message.tool_call_id is not None
    }
    unanswered = {i: [site] if (site := view.unanswered(i)) is not None else [] for i in sorted(ids)}
    mentioned = {i: last_mention(messages, i) for i in sorted(ids)}
    return view.call_sites(), list(view.tool_results()), view.successes_by_tool(), unanswered, mentioned


def view(messages: list[Message]) -> ToolResultsView:
    return ToolResultsView(Trajectory.model_construct(messages=messages))


def paired_once(messages: list[Message]) -> Any:
    """The answers for a list paired once (nothing follows it): all but where each id was last named, which is
    not kept (a search starts at the last message)."""
    got = answers(view, messages)
    if got[0] == "ambiguous":
        return got
    assert set(got[4].values()) <= {len(messages) - 1}
    return got[:4]


def without_mentions(expected: Any) -> Any:
    return expected if expected[0] == "ambiguous" else expected[:4]


IDS = st.sampled_from(["a", "b", "c"])


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["assistant", "assistant", "tool", "tool", "user"]))
    calls = [
        ToolCall(id=draw(IDS), name=draw(st.sampled_from(["get", "set"])), arguments={"n": draw(st.integers(0, 1))})
        for _ in range(draw(st.integers(0, 2) if role == "assistant" else st.sampled_from([0, 0, 0, 1])))
    ]  # a call on a tool or user message is not a call (only assistants call), but it still names its id
    answer = draw(IDS) if role == "tool" and draw(st.integers(0, 5)) else None
    return Message(role=role, tool_calls=calls, tool_call_id=answer, content="{}", is_error=draw(st.booleans()))


DIALOGUES = st.lists(messages(), max_size=12)


@settings(max_examples=400, deadline=None)
@given(DIALOGUES)
def test_a_list_paired_at_once_answers_as_the_rules_do(dialogue: list[Message]) -> None:
    expected = reference(dialogue)
    assert paired_once(dialogue) == without_mentions(expected)
    tracked = Pairing().feed_all(dialogue).snapshot()
    assert answers(view, PairedMessages(dialogue, tracked)) == expected
    try:
        sites: Any = reference_sites(dialogue)
    except DuplicateCallId as exc:
        sites = str(exc)
    try:
        assert Trajectory(messages=dialogue).call_sites() == sites
    except DuplicateCallId as exc:
        assert str(exc) == sites


@settings(max_examples=400, deadline=None)
@given(DIALOGUES)
def test_a_pairing_fed_message_by_message_answers_at_every_length_as_the_rules_do(dialogue: list[Message]) -> None:
    pairing = Pairing()
    taken = []
    for length, message in enumerate(dialogue, start=1):
        pairing.feed_all([message])
        snapshot = pairing.snapshot()
        taken.append((length, snapshot, copy.deepcopy(answers(view, PairedMessages(dialogue[:length], snapshot)))))
    for length, snapshot, seen in taken:  # later feeds left every earlier snapshot as it was
        carrying = PairedMessages(dialogue[:length], snapshot)
        assert carried(carrying) is snapshot
        assert seen == answers(view, carrying) == reference(dialogue[:length])


def test_a_list_that_carries_its_pairing_is_not_paired_again(monkeypatch: pytest.MonkeyPatch) -> None:
    dialogue = [
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="get")]),
        Message(role="tool", tool_call_id="a", content="{}"),
    ]
    carrying = PairedMessages(dialogue, Pairing().feed_all(dialogue).snapshot())
    monkeypatch.setattr(Pairing, "feed_all", lambda self, messages: pytest.fail("paired again"))
    assert [site.result is not None for site in Trajectory.model_construct(messages=carrying).call_sites()] == [True]


EDITS = {
    "setitem": lambda m: m.__setitem__(0, Message(role="user", content="x")),
    "setslice": lambda m: m.__setitem__(slice(0, 1), [Message(role="user", content="x")]),
    "delitem": lambda m: m.__delitem__(0),
    "iadd": lambda m: m.__iadd__([Message(role="user", content="x")]),
    "imul": lambda m: m.__imul__(2),
    "append": lambda m: m.append(Message(role="user", content="x")),
    "extend": lambda m: m.extend([Message(role="user", content="x")]),
    "insert": lambda m: m.insert(0, Message(role="user", content="x")),
    "pop": lambda m: m.pop(),
    "remove": lambda m: m.remove(m[0]),
    "clear": lambda m: m.clear(),
    "sort": lambda m: m.sort(key=lambda message: message.role),
    "reverse": lambda m: m.reverse(),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_any_edit_of_a_list_drops_the_pairing_it_carries(edit: str) -> None:
    dialogue = [
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="get")]),
        Message(role="tool", tool_call_id="a", content="{}"),
        Message(role="tool", tool_call_id="b", content="{}"),
    ]
    carrying = PairedMessages(dialogue, Pairing().feed_all(dialogue).snapshot())
    EDITS[edit](carrying)
    assert carried(carrying) is None
    assert paired_once(carrying) == without_mentions(reference(list(carrying)))


def test_a_pairing_of_another_length_is_not_read() -> None:
    dialogue = [Message(role="assistant", tool_calls=[ToolCall(id="a", name="get")])]
    stale = Pairing().feed_all([]).snapshot()
    carrying = PairedMessages(dialogue, stale)
    assert carried(carrying) is None
    assert paired(carrying) is not stale and len(paired(carrying).sites) == 1
    assert last_mention(carrying, "a") == 0


def test_an_ambiguity_is_raised_again_on_every_read_with_its_message() -> None:
    dialogue = [Message(role="assistant", tool_calls=[ToolCall(id="a", name="get"), ToolCall(id="a", name="get")])]
    carrying = PairedMessages(dialogue, Pairing().feed_all(dialogue).snapshot())
    trajectory = Trajectory.model_construct(messages=carrying)
    for _ in range(2):
        with pytest.raises(DuplicateCallId, match="'a' is used by two calls before the first is answered"):
            trajectory.call_sites()


CHAT_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("call"), IDS, st.sampled_from(["get", "set"])),
        st.tuples(st.just("result"), IDS, st.booleans()),
        st.tuples(st.just("user"), st.just(""), st.just(False)),
        st.tuples(st.just("truncate"), st.integers(0, 8), st.just(False)),
    ),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(CHAT_STEPS)
def test_a_chat_history_hands_out_the_pairing_of_exactly_what_it_converted(steps: list[Any]) -> None:
    history = ChatHistory(lenient_arguments=False)
    chat: list[dict[str, Any]] = []
    for kind, call_id, extra in steps:
        if kind == "call":
            function = {"name": extra, "arguments": "{}"}
            chat.append({"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "function": function}]})
        elif kind == "result":
            chat.append({"role": "tool", "tool_call_id": call_id, "content": "{}", "is_error": extra})
        elif kind == "user":
            chat.append({"role": "user", "content": "go on"})
        else:
            del chat[call_id:]
        try:
            trajectory = history.convert(chat)
        except Exception:  # refused by the reader (an id used twice): a new history, as the guard's cache does
            history, chat = ChatHistory(lenient_arguments=False), chat[:-1]
            continue
        assert carried(trajectory.messages) is not None
        assert answers(view, trajectory.messages) == reference(list(trajectory.messages))


def test_a_copied_or_unpickled_list_is_paired_as_its_messages_say() -> None:
    import pickle

    dialogue = [
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="get")]),
        Message(role="tool", tool_call_id="a", content="{}"),
    ]
    carrying = PairedMessages(dialogue, Pairing().feed_all(dialogue).snapshot())
    for other in (copy.copy(carrying), copy.deepcopy(carrying), pickle.loads(pickle.dumps(carrying))):
        if carried(other) is None:  # dropped as the copy was filled
            assert paired_once(other) == without_mentions(reference(list(other)))
        else:  # kept, for the very messages it was taken of
            assert answers(view, other) == reference(list(other))
