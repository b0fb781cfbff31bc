"""The record keeps each word a user said at the place it was first said, and a user message only for that.

A session object that did not ingest the host's history itself (a one-shot
hook process per event, another replica, an object rebuilt from the store)
reads the history from the start. Its calls are matched to the record, and a
user message is recorded only when it is the first to say one of its words:
the record keeps each word at its first place, so a message saying only words
already said would change nothing. Recording every user message again made
the record grow by the whole dialogue's user messages on every check of a
one-shot hook, until the session was full.

Held here against the rule before it (every user message recorded), on drawn
dialogues read by drawn sequences of fresh and kept session objects: the same
calls, results and order, and for every word and every call, the same answer to
"was it said before this call was made" (what a stated user id is checked
against).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import Message, ToolCall, Trajectory
from policyguard.session import MemorySessionStore
from policyguard.session.hostmerge import Batch
from policyguard.session.record import Session

WORDS = ["yes", "no", "u1", "u2", "O7", "please"]

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
        st.tuples(st.just("call"), st.sampled_from(["get_user", "set_limit"])),
    ),
    min_size=1,
    max_size=14,
)


def _dialogue(steps: list[tuple[str, Any]]) -> list[Message]:
    messages: list[Message] = []
    for number, (kind, what) in enumerate(steps):
        if kind == "user":
            messages.append(Message(role="user", content=" ".join(what) + "."))
        else:
            call = ToolCall(id=f"c{number}", name=what, arguments={"user_id": "u1"})
            messages.append(Message(role="assistant", tool_calls=[call]))
            messages.append(Message(role="tool", tool_call_id=call.id, content=f'{{"user_id": "u{number % 2 + 1}"}}'))
    return messages


def _old_take(self: Batch, message: Message) -> None:
    """The rule before: every user message recorded, whatever it says."""
    if message.role == "user" and message.content:
        self.message += 1
        self.events.append({"kind": "user", "content": message.content, "place": (self.message, 0)})
    elif message.role == "assistant" and message.tool_calls:
        self._issue(message.tool_calls)
    elif message.role == "tool" and message.tool_call_id is not None:
        self._answer(message)


@contextmanager
def _rule(old: bool) -> Iterator[None]:
    take = Batch.take
    if old:
        Batch.take = _old_take  # type: ignore[method-assign]
    try:
        yield
    finally:
        Batch.take = take  # type: ignore[method-assign]


def _record(messages: list[Message], reads: list[tuple[int, bool]], *, old: bool) -> tuple[Session, int]:
    """The record after observing growing prefixes; each read (prefix end, by a fresh object?). Its user events."""
    store = MemorySessionStore()
    session = Session("s", store, is_mutating=lambda name: name == "set_limit")
    with _rule(old):
        for end, fresh in reads:
            if fresh:  # as the guard does: the record is read from the store before the history is merged
                session = Session("s", store, is_mutating=lambda name: name == "set_limit")
                session.sync()
            session.observe(Trajectory(messages=messages[:end]))
    final = Session("s", store, is_mutating=lambda name: name == "set_limit")
    final.sync()
    return final, sum(1 for event in store.session_events("s") if event.kind == "user")


def _seen(session: Session) -> tuple[list[Any], dict[tuple[str, str], bool]]:
    view = session.view()
    sites = view.call_sites()
    said = view.said_words()
    calls = [(s.call.id, s.call.name, s.result.content if s.result else None) for s in sites]
    before = {(word, s.call.id): word in said and said[word] < s.order[0] for word in WORDS for s in sites}
    return calls, before


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, data=st.data())
def test_a_record_read_from_the_start_by_fresh_objects_says_what_the_old_rule_said(
    steps: list[tuple[str, Any]], data: st.DataObject
) -> None:
    messages = _dialogue(steps)
    ends = sorted(data.draw(st.lists(st.integers(1, len(messages)), min_size=1, max_size=6), label="prefixes"))
    reads = [(end, data.draw(st.booleans(), label=f"fresh object at {end}")) for end in ends + [len(messages)]]
    new, new_users = _record(messages, reads, old=False)
    old, _ = _record(messages, reads, old=True)
    assert _seen(new) == _seen(old)
    assert new_users <= sum(1 for m in messages if m.role == "user")  # never a user message recorded twice


def test_one_shot_readers_of_the_same_dialogue_do_not_grow_the_record() -> None:
    messages = _dialogue([("user", ["u1", "please"]), ("call", "get_user"), ("user", ["yes"]), ("call", "set_limit")])
    store = MemorySessionStore()
    for _ in range(20):  # twenty hook processes, each with a record object of its own, read from the store
        session = Session("s", store, is_mutating=lambda name: name == "set_limit")
        session.sync()
        session.observe(Trajectory(messages=messages))
    kinds = [event.kind for event in store.session_events("s")]
    assert kinds.count("user") == 2 and kinds.count("call") == 2 and kinds.count("result") == 2
