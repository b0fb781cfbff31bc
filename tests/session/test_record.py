"""The guard's own record of a conversation: what the host forgets, the guard does not.

The desk is :mod:`tests.session.credits`: one goodwill credit per conversation, limits only raised.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from policyguard import Guard, Message, ToolCall, Trajectory
from policyguard.audit.trace import Trace
from policyguard.session import MemorySessionStore, SessionEvicted
from policyguard.trajectory.messages import DuplicateCallId

from .credits import answer, asked, call, credit, make_guard


def run(guard: Guard, session: Any, history: list[Message], pending: ToolCall, result: Any = None) -> str:
    """One loop step: the assistant message, the check, and (when allowed) the tool's result told to the guard."""
    history.append(asked(pending))
    decision = guard.check(pending, Trajectory(messages=list(history)), session=session)
    if decision.outcome != "allow":
        history.append(answer(pending.id, decision.message or "", error=True))
        return "blocked: " + (decision.message or "")
    text = json.dumps(result if result is not None else {"ok": True})
    guard.record_result(session, pending.id, text)
    history.append(answer(pending.id, text))
    return "allowed"


# -- what the host forgets ------------------------------------------------------


def test_a_credit_the_host_trimmed_from_its_history_still_counts():
    guard = make_guard()
    session = guard.session("conv-1")
    history = [Message(role="user", content="I want a credit")]
    assert run(guard, session, history, credit("c1")) == "allowed"
    trimmed = [Message(role="user", content="I want another credit")]  # the host kept only the newest turn
    assert run(guard, session, trimmed, credit("c2")).startswith("blocked")


def test_the_same_trimmed_history_without_a_session_lets_the_second_credit_through():
    """The bypass the record closes: a one-shot check knows only what the host sends."""
    guard = make_guard()
    trimmed = [Message(role="user", content="I want another credit"), asked(credit("c2"))]
    assert guard.check(credit("c2"), Trajectory(messages=trimmed)).outcome == "allow"


def test_a_summary_that_replaces_the_history_erases_nothing():
    guard = make_guard()
    session = guard.session()
    history = [Message(role="user", content="credit please")]
    run(guard, session, history, credit("c1"))
    summary = [Message(role="user", content="Summary: the customer asked about credits."), *history[-2:]]
    assert run(guard, session, summary, credit("c2")).startswith("blocked")


def test_a_result_edited_in_the_hosts_history_does_not_change_the_record():
    guard = make_guard()
    session = guard.session()
    history = [Message(role="user", content="credit please")]
    run(guard, session, history, credit("c1"))
    history[-1] = answer("c1", "Error: the credit failed", error=True)  # the host rewrites the result
    assert run(guard, session, history, credit("c2")).startswith("blocked")


# -- unknown fates ----------------------------------------------------------------


def test_a_credit_whose_outcome_is_unknown_counts_as_sent_and_the_block_says_to_check():
    guard = make_guard()
    session = guard.session()
    history = [asked(credit("c1"))]
    assert guard.check(credit("c1"), Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_unknown(session, "c1", "the client cancelled the request")
    retry = credit("c2")
    decision = guard.check(retry, Trajectory(messages=[*history, asked(retry)]), session=session)
    assert decision.outcome == "block"
    assert "not known (the client cancelled the request)" in (decision.message or "")
    assert "check the current state with a read" in (decision.message or "")


def test_a_limit_change_of_unknown_outcome_is_no_fact_until_the_account_is_read_again():
    guard = make_guard()
    session = guard.session()
    history: list[Message] = []
    run(guard, session, history, call("r1", "get_account", account_id="A1"), {"account_id": "A1", "limit": 100})
    history.append(asked(call("w1", "set_limit", account_id="A1", limit=500)))
    assert guard.check(history[-1].tool_calls[0], Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_unknown(session, "w1", "the upstream timed out")
    lower = call("w2", "set_limit", account_id="A1", limit=200)  # >= 100, but the account may be at 500 now
    assert run(guard, session, history, lower).startswith("blocked")
    # the honest path: read the account again; the read settles what the limit is
    run(guard, session, history, call("r2", "get_account", account_id="A1"), {"account_id": "A1", "limit": 100})
    assert run(guard, session, history, call("w3", "set_limit", account_id="A1", limit=200)) == "allowed"


def test_a_failed_credit_does_not_count():
    guard = make_guard()
    session = guard.session()
    history: list[Message] = []
    history.append(asked(credit("c1")))
    assert guard.check(credit("c1"), Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_result(session, "c1", "Error: payment service refused", is_error=True)
    assert run(guard, session, [], credit("c2")) == "allowed"


def test_a_blocked_call_never_happened_for_the_rules():
    guard = make_guard()
    session = guard.session()
    history: list[Message] = []
    run(guard, session, history, call("r1", "get_account", account_id="A1"), {"account_id": "A1", "limit": 100})
    assert run(guard, session, history, call("w1", "set_limit", account_id="A1", limit=50)).startswith("blocked")
    assert run(guard, session, history, call("w2", "set_limit", account_id="A1", limit=150)) == "allowed"


# -- ids, ambiguity, limits -------------------------------------------------------


def test_an_allowed_call_checked_again_before_its_outcome_is_known_is_refused():
    guard = make_guard()
    session = guard.session()
    history = [asked(credit("c1"))]
    assert guard.check(credit("c1"), Trajectory(messages=history), session=session).outcome == "allow"
    again = guard.check(credit("c1"), Trajectory(messages=history), session=session)
    assert again.outcome == "block" and again.stage == "bad_call"
    assert "allowed already" in (again.message or "")


def test_an_ambiguous_history_is_refused_and_records_nothing():
    guard = make_guard()
    session = guard.session()
    ambiguous = [asked(call("x", "get_account", account_id="A1")), asked(call("x", "get_account", account_id="A2"))]
    decision = guard.check(credit("c1"), Trajectory(messages=[*ambiguous, asked(credit("c1"))]), session=session)
    assert decision.outcome == "block" and decision.stage == "bad_call"
    assert guard.sessions.session_events(session.id) == [
        e for e in guard.sessions.session_events(session.id) if e.kind == "call" and e.judged == "block"
    ]


def test_a_history_refused_as_ambiguous_leaves_what_the_record_knew_of_the_host_as_it_was():
    """An observe that raises records nothing and forgets nothing: a read answered before stays answered (the
    refused part reused its id), so a second result for it is still refused when the history is read again."""
    guard = make_guard()
    session = guard.session()
    history = [asked(call("r1", "get_account", account_id="A1")), answer("r1", {"account_id": "A1"})]
    session.observe(Trajectory(messages=history))
    twice = asked(call("z", "get_account", account_id="A3"), call("z", "get_account", account_id="A4"))
    with pytest.raises(DuplicateCallId, match="twice in one message"):
        session.observe(Trajectory(messages=[*history, asked(call("r1", "get_account", account_id="A2")), twice]))
    with pytest.raises(DuplicateCallId, match="has two results"):
        session.observe(Trajectory(messages=[*history, answer("r1", {"account_id": "A1"})]))


def test_an_evicted_session_refuses_writes_and_says_why_but_reads_pass():
    clock = [1000.0]
    store = MemorySessionStore(retention_s=60, clock=lambda: clock[0])
    guard = make_guard(sessions=store)
    session = guard.session("old")
    run(guard, session, [], credit("c1"))
    clock[0] += 3600
    with pytest.raises(SessionEvicted):
        store.session_events("old")
    fresh = make_guard(sessions=store)  # another process: nothing in memory
    decision = fresh.check(credit("c2"), Trajectory(messages=[asked(credit("c2"))]), session="old")
    assert decision.outcome == "block"
    assert "no longer keeps the record of this conversation" in (decision.message or "")
    read = call("r1", "get_account", account_id="A1")
    assert fresh.check(read, Trajectory(messages=[asked(read)]), session="old").outcome == "allow"


def test_a_full_session_refuses_writes():
    guard = make_guard(sessions=MemorySessionStore(max_events=3))  # the read issued, judged and answered fills it
    session = guard.session()
    history: list[Message] = []
    run(guard, session, history, call("r1", "get_account", account_id="A1"), {"account_id": "A1", "limit": 1})
    decision = guard.check(credit("c1"), Trajectory(messages=[*history, asked(credit("c1"))]), session=session)
    assert decision.outcome == "block"
    assert "too long for the guard's record" in (decision.message or "")


def test_a_deny_in_one_session_does_not_refuse_the_same_call_id_in_another():
    from policyguard.enforcement.store import SQLiteStore

    store = SQLiteStore(":memory:")
    guard = make_guard(denials=store)
    low = call("call_5", "set_limit", account_id="A1", limit=1)
    read = call("call_1", "get_account", account_id="A1")
    for name, expected in (("a", "blocked"), ("b", "allowed")):
        session = guard.session(name)
        history: list[Message] = []
        run(guard, session, history, read, {"account_id": "A1", "limit": 1 if name == "b" else 9})
        assert run(guard, session, history, low).split(":")[0] == expected


def test_trace_events_carry_the_session_id():
    trace = Trace(keep=True)
    guard = make_guard(trace=trace)
    run(guard, guard.session("s-42"), [], credit("c1"))
    events = [e for e in trace.events if e["event"] in ("submit", "allow", "decision")]
    assert events and all(e["session_id"] == "s-42" for e in events)


# -- writes of one session wait for each other ------------------------------------


def test_a_second_write_waits_for_the_first_ones_outcome():
    guard = make_guard()
    session = guard.session()
    first, second = credit("c1"), credit("c2")
    both = [asked(first, second)]
    assert guard.check(first, Trajectory(messages=both), session=session).outcome == "allow"
    decided: list[str] = []

    def check_second() -> None:
        decided.append(guard.check(second, Trajectory(messages=both), session=session).outcome)

    waiter = threading.Thread(target=check_second)
    waiter.start()
    time.sleep(0.2)
    assert decided == []  # still waiting for c1's fate
    guard.record_result(session, "c1", "Error: refused", is_error=True)  # c1 failed: c2 may go
    waiter.join(5)
    assert decided == ["allow"]


def test_a_write_that_waited_too_long_counts_the_running_one_as_done():
    guard = make_guard(session_wait_s=0.05)
    session = guard.session()
    first, second = credit("c1"), credit("c2")
    both = [asked(first, second)]
    assert guard.check(first, Trajectory(messages=both), session=session).outcome == "allow"
    assert guard.check(second, Trajectory(messages=both), session=session).outcome == "block"


class SlowGate:
    """The checklist's gate, taking ``seconds`` per check: the time a verifier model would take."""

    def __init__(self, guard: Guard, seconds: float) -> None:
        self.inner, self.seconds = guard.gate, seconds

    def check(self, call: ToolCall, trajectory: Any, context: Any) -> Any:
        time.sleep(self.seconds)
        assert self.inner is not None
        return self.inner.check(call, trajectory, context)


def test_two_writes_checked_at_the_same_time_are_judged_one_after_the_other():
    """Two credits of one message checked in parallel: the second is judged once the first ran, so one is sent."""
    guard = make_guard()
    guard.gate = SlowGate(guard, 0.2)
    session = guard.session()
    calls = [credit("c1"), credit("c2")]
    both = Trajectory(messages=[asked(*calls)])
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def check_and_run(pending: ToolCall) -> None:
        start.wait()
        outcomes[pending.id] = guard.check(pending, both, session=session).outcome
        if outcomes[pending.id] == "allow":
            guard.record_result(session, pending.id, '{"ok": true}')

    threads = [threading.Thread(target=check_and_run, args=(pending,)) for pending in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(outcomes.values()) == ["allow", "block"]


def test_a_write_whose_turn_does_not_come_in_time_is_blocked_not_judged_without_the_other():
    guard = make_guard(session_wait_s=0.05)
    guard.gate = SlowGate(guard, 0.5)
    session = guard.session()
    first = threading.Thread(
        target=guard.check, args=(credit("c1"), Trajectory(messages=[asked(credit("c1"))])), kwargs={"session": session}
    )
    first.start()
    time.sleep(0.1)  # c1 holds the session's turn while the gate judges it
    guard.gate = guard.gate.inner  # the second check itself is quick
    decision = guard.check(credit("c2"), Trajectory(messages=[asked(credit("c2"))]), session=session)
    first.join(5)
    assert decision.outcome == "block"
    assert "another change in this conversation is still being checked" in (decision.message or "")


def test_a_cancelled_async_check_leaves_the_sessions_turn_free():
    import asyncio

    guard = make_guard(session_wait_s=5)
    guard.gate = SlowGate(guard, 0.3)
    session = guard.session()

    async def scenario() -> float:
        holder = asyncio.create_task(guard.acheck(credit("c1"), [asked(credit("c1"))], session=session))
        await asyncio.sleep(0.1)
        waiter = asyncio.create_task(guard.acheck(credit("c2"), [asked(credit("c2"))], session=session))
        await asyncio.sleep(0.05)
        waiter.cancel()  # cancelled while it waits for c1's turn
        assert (await holder).outcome == "allow"
        guard.record_result(session, "c1", "Error: refused", is_error=True)
        guard.gate = guard.gate.inner
        started = time.monotonic()
        third = await guard.acheck(credit("c3"), [asked(credit("c3"))], session=session)
        assert third.outcome == "allow"
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2  # the cancelled check holds no turn: c3 did not wait for it
