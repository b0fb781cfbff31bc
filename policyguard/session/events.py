"""What a session record is made of: append-only events, numbered by the store.

A session's record is a list of events with increasing ``seq``; nothing in it
is ever changed or removed (only a whole session is, when the store evicts it).
The state of a call is what its events say:

* ``call``: a call the guard saw, at its ``place``: the host's assistant
  message that issued it (numbered in the session, shared with user messages)
  and its position there. ``judged`` says how: ``allow`` or ``block`` (the
  guard decided it when the host's history did not show it yet), ``seen`` (the
  host's history issued it: a read the host ran without asking, or a call
  still to be judged).
* ``judge``: the guard's decision (``judged``) on the ``seen`` call event
  numbered ``answers``: the host issued it, then asked.
* ``result``: the answer to the call event numbered ``answers``: its text and
  whether the tool reported an error.
* ``unknown``: the call event ``answers`` was allowed and its fate cannot be
  learned: the client cancelled, the upstream timed out, the process died.
  ``content`` says why.
* ``user``: a user message's text, for checks that read what the user said.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EventKind = Literal["call", "judge", "result", "unknown", "user"]
Judged = Literal["allow", "block", "seen"]


class NewEvent(BaseModel):
    """An event before the store numbered it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EventKind
    call_id: str = ""
    tool: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    judged: Judged = "seen"
    answers: int = 0
    content: str = ""
    is_error: bool = False
    place: tuple[int, int] | None = None  # call and user events: (message number, position in it)


class SessionEvent(NewEvent):
    """An event as the store keeps it: numbered within its session (1, 2, ...) and timestamped."""

    seq: int
    at: float


def numbered(events: list[NewEvent] | tuple[NewEvent, ...], last_seq: int, now: float) -> list[SessionEvent]:
    """``events`` numbered after ``last_seq``, for a store's append.

    A negative ``answers`` refers to an event of the same append, that many
    places back (a call and its result ingested together); it becomes that
    event's number. One that points before the append, or at an event that is
    not a call, is a programming error and raises ValueError.
    """
    out: list[SessionEvent] = []
    for offset, event in enumerate(events):
        seq = last_seq + offset + 1
        answers = event.answers
        if answers < 0:
            back = offset + answers
            if back < 0 or out[back].kind != "call":
                raise ValueError(f"event {offset} answers {answers}: no call of this append is there")
            answers = out[back].seq
        out.append(SessionEvent(**{**event.model_dump(), "answers": answers}, seq=seq, at=now))
    return out


def decisions(events: list[SessionEvent]) -> list[tuple[str, Judged]]:
    """The guard's decisions in a record, in the order it made them: ``(call id, allow | block)``.

    A decision is a ``judge`` event on a call the host issued, or a ``call``
    event judged when the host's history did not show the call yet.
    """
    return [
        (event.call_id, event.judged)
        for event in events
        if event.kind == "judge" or (event.kind == "call" and event.judged != "seen")
    ]
