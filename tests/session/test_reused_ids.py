"""Reused call ids in a session: a justified block names one issued call, never a later call that reuses its id.

Stacks that number calls per turn send ``call_0`` every turn. In a session the
guard names a call by its id, tool, arguments and the place the host issued it
(the record's message and position), so deny wins refuses the same issued call
checked again, and judges a later ``call_0`` on its own merits.
"""

from __future__ import annotations

import json

from policyguard import Message, Trajectory
from policyguard.enforcement.store import SQLiteStore

from .credits import answer, asked, call, make_guard

RAISE = {"account_id": "A1", "limit": 20}


def test_a_write_blocked_for_a_missing_read_passes_when_it_comes_again_as_call_0_after_the_read() -> None:
    guard = make_guard(denials=SQLiteStore())
    session = guard.session()
    history: list[Message] = [Message(role="user", content="raise my limit to 20")]
    first = call("call_0", "set_limit", **RAISE)
    history.append(asked(first))
    blocked = guard.check(first, Trajectory(messages=history), session=session)
    assert blocked.outcome == "block" and "get_account" in (blocked.message or "")
    history.append(answer("call_0", blocked.message or "", error=True))
    read = call("call_0", "get_account", account_id="A1")
    history.append(asked(read))
    assert guard.check(read, Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_result(session, "call_0", json.dumps({"account_id": "A1", "limit": 10}))
    history.append(answer("call_0", {"account_id": "A1", "limit": 10}))
    again = call("call_0", "set_limit", **RAISE)
    history.append(asked(again))
    assert guard.check(again, Trajectory(messages=history), session=session).outcome == "allow"


def test_the_same_issued_call_checked_again_after_a_block_stays_blocked() -> None:
    guard = make_guard(denials=SQLiteStore())
    session = guard.session()
    first = call("call_0", "set_limit", **RAISE)
    history = [asked(first)]
    assert guard.check(first, Trajectory(messages=history), session=session).outcome == "block"
    # the host shows the same message again, now with a read answered before it: still the call that was refused
    sneaked = [asked(call("r", "get_account", account_id="A1")), answer("r", {"account_id": "A1", "limit": 10})]
    again = guard.check(first, Trajectory(messages=[*sneaked, *history]), session=session)
    assert again.outcome == "block"


def test_a_deny_of_call_0_in_one_session_does_not_refuse_call_0_in_another() -> None:
    store = SQLiteStore()
    guard = make_guard(denials=store)
    first = call("call_0", "set_limit", **RAISE)
    assert guard.check(first, Trajectory(messages=[asked(first)]), session="a").outcome == "block"
    opened = [asked(call("r", "get_account", account_id="A1")), answer("r", {"account_id": "A1", "limit": 10})]
    assert guard.check(first, Trajectory(messages=[*opened, asked(first)]), session="b").outcome == "allow"
