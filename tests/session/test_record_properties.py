"""Property: whatever the host does with its history, a write limited to once runs at most once per session.

The host below interleaves credits (the once-per-conversation write of
``test_record``), reads, reused call ids, results that fail, calls whose fate
is unknown (and for which the host may even show an error result, as a proxy
that timed out does), calls still running, and histories that are trimmed,
summarised or dropped. A credit "may have run" when the guard allowed it and
its fate is not a failure the integration reported; there is never more than
one.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import Message, ToolCall, Trajectory

from .credits import make_guard

STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("credit"),
            st.sampled_from(
                ["ran", "failed", "unknown", "unknown-host-error", "running", "host-only", "host-only-error"]
            ),
        ),
        st.tuples(st.just("read"), st.just("")),
        st.tuples(st.just("trim"), st.integers(0, 6)),
        st.tuples(st.just("summarise"), st.integers(0, 4)),
        st.tuples(st.just("forget-last"), st.just("")),
    ),
    max_size=14,
)


@settings(max_examples=400, deadline=None)
@given(steps=STEPS, reuse_ids=st.booleans(), copies=st.booleans())
def test_no_once_limited_write_runs_twice_in_a_session(
    steps: list[tuple[str, Any]], reuse_ids: bool, copies: bool
) -> None:
    """``copies``: the host sends new message objects on every check (as an HTTP client does)."""
    guard = make_guard(session_wait_s=0)
    session = guard.session()
    history: list[Message] = [Message(role="user", content="hello")]
    may_have_run = 0
    counter = 0
    for action, detail in steps:
        counter += 1
        call_id = "call_1" if reuse_ids else f"call_{counter}"
        if action in ("credit", "read"):
            name, arguments = (
                ("send_credit", {"user_id": "u1", "amount": 50})
                if action == "credit"
                else ("get_account", {"account_id": "A1"})
            )
            call = ToolCall(id=call_id, name=name, arguments=arguments)
            history.append(Message(role="assistant", tool_calls=[call]))
            try:
                sent = [m.model_copy(deep=True) for m in history] if copies else list(history)
                decision = guard.check(call, Trajectory(messages=sent), session=session)
            except Exception as exc:  # the guard refuses by decision, never by raising
                raise AssertionError(f"check raised {exc!r}") from exc
            if decision.outcome != "allow":
                history.append(Message(role="tool", tool_call_id=call_id, content="blocked", is_error=True))
                continue
            fate = detail if action == "credit" else "ran"
            if action == "credit" and fate != "failed":
                may_have_run += 1
            if fate == "ran":
                text = json.dumps({"account_id": "A1", "limit": 1} if action == "read" else {"ok": True})
                guard.record_result(session, call_id, text)
                history.append(Message(role="tool", tool_call_id=call_id, content=text))
            elif fate == "failed":
                guard.record_result(session, call_id, "Error: refused", is_error=True)
                history.append(Message(role="tool", tool_call_id=call_id, content="Error: refused", is_error=True))
            elif fate in ("unknown", "unknown-host-error"):
                guard.record_unknown(session, call_id, "cancelled")
                if fate == "unknown-host-error":  # the host's history claims the call failed
                    history.append(Message(role="tool", tool_call_id=call_id, content="Error: timeout", is_error=True))
                else:
                    history.pop()  # the host recorded neither call nor result
            elif fate == "host-only":  # the integration reports nothing; the host's history has the result
                history.append(Message(role="tool", tool_call_id=call_id, content=json.dumps({"ok": True})))
            elif fate == "host-only-error":  # ... and says it failed: it may still have run, it still counts
                history.append(Message(role="tool", tool_call_id=call_id, content="Error: x", is_error=True))
            # "running": no fate reported, and the host shows the call unanswered
        elif action == "trim":
            history = history[-detail:] if detail else []
        elif action == "summarise":
            history = [Message(role="user", content="Summary of the conversation so far."), *history[-detail:]]
        elif action == "forget-last" and history:
            history.pop()
        assert may_have_run <= 1, f"a second credit may have run after {steps}"
