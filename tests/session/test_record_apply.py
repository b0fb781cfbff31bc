"""Property: the record applies events the same however often the gate read it in between.

A session keeps its sites sorted by place (``_order``) and, between checks,
the view's settled prefix. Applying an event finds where a new call goes, and
cuts the prefix back when an event changes a site inside it; both take a
shortcut for the common case (the newest call goes last; a change past the
prefix cuts nothing). Here a record that was read after every event must
give, at every step, the order and the view of a record that applied the
same events with no read in between (whose prefix is empty, so no shortcut
applies), and its order must be the sites sorted by place.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.session.events import SessionEvent
from policyguard.session.record import Session
from policyguard.session.store import MemorySessionStore

# (kind, which earlier call it answers or how it is judged, message number, position)
EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["call", "call", "judge", "result", "error", "unknown", "user"]),
        st.sampled_from(["allow", "block", "seen"]),
        st.integers(0, 30),  # which earlier call an answer is for (modulo the calls so far)
        st.integers(0, 8),  # the message number: a read fetched for an older call is placed back in time
        st.integers(0, 2),
    ),
    max_size=40,
)


def _events(steps: list[tuple[str, str, int, int, int]]) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    calls: list[int] = []
    for seq, (kind, judged, pick, message, position) in enumerate(steps, 1):
        fields: dict[str, Any] = {"seq": seq, "at": 0.0}
        if kind == "call" or not calls and kind != "user":
            calls.append(seq)
            fields |= {"kind": "call", "call_id": f"c{seq}", "tool": "write" if seq % 2 else "read",
                       "judged": judged, "place": (message, position)}  # fmt: skip
        elif kind == "user":
            fields |= {"kind": "user", "content": "yes", "place": (message, 0)}
        else:
            answers = calls[pick % len(calls)]
            fields |= {"call_id": f"c{answers}", "answers": answers}
            if kind == "judge":
                fields |= {"kind": "judge", "judged": "block" if judged == "block" else "allow"}
            else:
                fields |= {"kind": "result" if kind != "unknown" else "unknown", "content": f"r{seq}",
                           "is_error": kind == "error"}  # fmt: skip
        out.append(SessionEvent(**fields))
    return out


def _session() -> Session:
    return Session("s", MemorySessionStore(), is_mutating=lambda name: name == "write")


def _seen(session: Session) -> tuple[list[Any], dict[str, Any]]:
    view = session.view()
    return view.call_sites(), view.successes_by_tool()


@settings(max_examples=300, deadline=None)
@given(steps=EVENTS)
def test_a_record_read_between_events_orders_and_shows_what_one_read_once_does(
    steps: list[tuple[str, str, int, int, int]],
) -> None:
    events = _events(steps)
    read_often = _session()
    for count, event in enumerate(events, 1):
        read_often._apply(event)
        once = _session()
        for earlier in events[:count]:
            once._apply(earlier)
        assert read_often._order == once._order == sorted(range(len(once.sites)), key=lambda i: once.sites[i].key)
        assert _seen(read_often) == _seen(once)
