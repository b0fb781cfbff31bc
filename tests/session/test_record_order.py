"""The record orders calls as the host issued them: what it refuses, and what it still allows.

A framework may run the calls of one assistant message concurrently (LangChain's
tool node, the Agents SDK), and their results may come back in any order. So a
read issued in the same message as a write to the same record is never taken as
the state after that write, whichever comes first in the message and whichever
result arrives last; and a sibling call of the pending one, issued before it in
the same message, counts even while another check is still judging it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from policyguard import Guard, Message, ToolCall, Trajectory
from policyguard.session import MemorySessionStore

from .credits import answer, asked, call, credit, make_guard

RAISE = call("w1", "set_limit", account_id="A1", limit=20)
LOWER = call("w2", "set_limit", account_id="A1", limit=15)


def reread(call_id: str = "r1") -> ToolCall:
    return call(call_id, "get_account", account_id="A1")


def opening() -> list[Message]:
    """The account read once: its limit is 10."""
    return [asked(reread("r0")), answer("r0", {"account_id": "A1", "limit": 10})]


def concurrent_write_and_read(guard: Guard, session: Any, order: list[ToolCall], arrival: list[str]) -> list[Message]:
    """One message issuing the raise and a re-read, run concurrently: the re-read returns the account as it was
    before the raise (limit 10); the raise answers with a plain "OK", which is not the account."""
    history = opening()
    for message in history:  # the opening read, through the guard as an integration would
        if message.tool_calls:
            guard.check(message.tool_calls[0], Trajectory(messages=[message]), session=session)
    guard.record_result(session, "r0", history[1].content or "")
    history.append(asked(*order))
    results = {"w1": "OK", "r1": json.dumps({"account_id": "A1", "limit": 10})}
    for pending in order:
        decision = guard.check(pending, Trajectory(messages=list(history)), session=session)
        assert decision.outcome == "allow", decision.message
        if pending.id == "r1" and order[0].id == "r1":
            # a write waits for the reads issued before it in its message: the framework's read answers first
            guard.record_result(session, "r1", results["r1"])
    for call_id in arrival:
        if call_id != "r1" or order[0].id != "r1":
            guard.record_result(session, call_id, results[call_id])
        history.append(answer(call_id, results[call_id]))
    return history


@pytest.mark.parametrize(
    ("order", "arrival"),
    [
        pytest.param([RAISE, reread()], ["w1", "r1"], id="read-after-write-in-the-message"),
        pytest.param([reread(), RAISE], ["w1", "r1"], id="read-before-write-results-out-of-order"),
        pytest.param([reread(), RAISE], ["r1", "w1"], id="read-before-write-results-in-order"),
        pytest.param([RAISE, reread()], ["r1", "w1"], id="read-after-write-results-out-of-order"),
    ],
)
def test_a_read_issued_with_a_write_is_not_the_state_after_it(order: list[ToolCall], arrival: list[str]) -> None:
    guard = make_guard()
    session = guard.session()
    history = concurrent_write_and_read(guard, session, order, arrival)
    history.append(asked(LOWER))
    decision = guard.check(LOWER, Trajectory(messages=history), session=session)
    assert decision.outcome == "block"  # 15 is below the raised limit of 20: the stale read (10) must not pass it
    assert "get_account" in (decision.message or "")  # it asks for the account to be read again
    one_shot = make_guard().check(LOWER, Trajectory(messages=history))
    assert one_shot.outcome == "block"  # the history read once says the same


def test_a_write_whose_earlier_sibling_read_never_answers_is_not_judged_on_an_older_read() -> None:
    """[re-read, raise] in one message; the raise is checked while the re-read has no result, and none comes
    within the wait: what it will return is the state before the raise, so the older read is not used."""
    guard = make_guard(session_wait_s=0.3)
    session = guard.session()
    history = [*opening(), asked(reread(), RAISE)]
    decision = guard.check(RAISE, Trajectory(messages=history), session=session)
    assert decision.outcome == "block" and "no result yet" in (decision.message or "")
    one_shot = make_guard().check(
        RAISE, Trajectory(messages=[*history, answer("r1", {"account_id": "A1", "limit": 30})])
    )
    assert one_shot.outcome == "block"  # the history read once, with the re-read's answer, agrees


def test_a_write_waits_for_the_earlier_sibling_read_run_beside_it() -> None:
    guard = make_guard(session_wait_s=5)
    session = guard.session()
    history = [*opening(), asked(reread(), RAISE)]
    guard.check(reread(), Trajectory(messages=history), session=session)
    timer = threading.Timer(0.2, guard.record_result, (session, "r1", json.dumps({"account_id": "A1", "limit": 10})))
    timer.start()
    try:
        assert guard.check(RAISE, Trajectory(messages=history), session=session).outcome == "allow"
    finally:
        timer.join()


def test_after_reading_again_the_write_is_judged_on_the_new_state() -> None:
    guard = make_guard()
    session = guard.session()
    history = concurrent_write_and_read(guard, session, [RAISE, reread()], ["r1", "w1"])
    history += [asked(reread("r2")), answer("r2", {"account_id": "A1", "limit": 20})]
    raise_again = call("w3", "set_limit", account_id="A1", limit=25)
    history.append(asked(raise_again))
    assert guard.check(raise_again, Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_result(session, "w3", "OK")
    lower = call("w4", "set_limit", account_id="A1", limit=15)
    assert guard.check(lower, Trajectory(messages=[*history, asked(lower)]), session=session).outcome == "block"


def test_a_write_judged_before_the_history_showed_it_keeps_its_concurrent_read_before_it() -> None:
    """The host checks the raise with a history that does not show it yet, runs it beside a re-read, then
    shows the message: the re-read (stale) is placed in the raise's message, so it is not the state after it."""
    guard = make_guard()
    session = guard.session()
    history = opening()
    assert guard.check(RAISE, Trajectory(messages=history), session=session).outcome == "allow"
    guard.record_result(session, "w1", "OK")
    history += [asked(RAISE, reread()), answer("w1", "OK"), answer("r1", {"account_id": "A1", "limit": 10})]
    history.append(asked(LOWER))
    assert guard.check(LOWER, Trajectory(messages=history), session=session).outcome == "block"


def test_a_call_matched_to_an_old_one_after_a_rewrite_never_pulls_a_new_sibling_back_in_time() -> None:
    """Ids numbered per turn: after a summary the history is read again and turn 3's call_0 read matches turn 1's
    record (same id, tool and arguments); the new write issued with it is still placed after everything."""
    guard = make_guard()
    session = guard.session()
    read = call("call_0", "get_account", account_id="A1")
    history: list[Message] = []
    for turn in range(3):
        history += [Message(role="user", content=f"turn {turn}"), asked(read)]
        assert guard.check(read, Trajectory(messages=history), session=session).outcome == "allow"
        guard.record_result(session, "call_0", json.dumps({"account_id": "A1", "limit": 10 + turn}))
        history.append(answer("call_0", {"account_id": "A1", "limit": 10 + turn}))
    write = call("call_1", "set_limit", account_id="A1", limit=30)
    rewritten = [Message(role="user", content="Summary: the limit was read."), asked(read, write)]
    assert guard.check(write, Trajectory(messages=rewritten), session=session).outcome == "allow"
    sites = session.view().call_sites()
    [written] = [site.order for site in sites if site.call.name == "set_limit"]
    assert all(written[0] > site.order[0] for site in sites if site.call.name == "get_account")


# -- siblings of one message ------------------------------------------------------


@pytest.mark.parametrize("first", ["c1", "c2"])
def test_two_credits_of_one_message_never_both_pass_whichever_is_judged_first(first: str) -> None:
    guard = make_guard()
    session = guard.session()
    message = asked(credit("c1"), credit("c2"))
    calls = {"c1": credit("c1"), "c2": credit("c2")}
    order = [first, "c2" if first == "c1" else "c1"]
    outcomes: dict[str, str] = {}
    for cid in order:
        outcomes[cid] = guard.check(calls[cid], Trajectory(messages=[message]), session=session).outcome
        if outcomes[cid] == "allow":
            guard.record_result(session, cid, json.dumps({"ok": True}))
    assert outcomes == {"c1": "allow", "c2": "block"}  # as the history read once: c2 comes after c1
    for cid in ("c1", "c2"):
        one_shot = make_guard().check(calls[cid], Trajectory(messages=[message]))
        assert not (outcomes[cid] == "allow" and one_shot.outcome != "allow")


def test_an_unjudged_sibling_checked_on_another_replica_counts() -> None:
    """Two guards share one store; the second message's calls are judged one on each, the later one first."""
    store = MemorySessionStore()
    one, two = make_guard(sessions=store), make_guard(sessions=store)
    message = asked(credit("c1"), credit("c2"))
    later = two.check(credit("c2"), Trajectory(messages=[message]), session="conv")
    earlier = one.check(credit("c1"), Trajectory(messages=[message]), session="conv")
    assert later.outcome == "block"  # c1 was issued before it, unjudged and unanswered: counted, as one-shot does
    assert earlier.outcome == "allow"


def test_a_later_sibling_judged_first_is_not_taken_as_having_happened_before() -> None:
    """A credit issued after a limit read in the same message does not make the read older than it."""
    guard = make_guard()
    session = guard.session()
    first, second = credit("c1"), credit("c2")
    message = asked(first, second)
    assert guard.check(second, Trajectory(messages=[message]), session=session).outcome == "block"
    assert guard.check(first, Trajectory(messages=[message]), session=session).outcome == "allow"
    # and once c1 has run, a third credit in a later message is refused
    guard.record_result(session, "c1", json.dumps({"ok": True}))
    third = credit("c3")
    history = [message, answer("c1", {"ok": True}), answer("c2", "blocked", error=True), asked(third)]
    assert guard.check(third, Trajectory(messages=history), session=session).outcome == "block"


def test_an_issued_call_the_history_no_longer_shows_and_nobody_judged_does_not_count() -> None:
    """As the one-shot reader: an unanswered, unjudged call counts while the history shows it."""
    guard = make_guard()
    session = guard.session()
    abandoned = asked(credit("c1"))
    guard.record_result(session, "nothing", "")  # no call of that id: nothing recorded
    session.observe(Trajectory(messages=[abandoned]))  # issued, its check never came
    honest = credit("c2")
    decision = guard.check(honest, Trajectory(messages=[asked(honest)]), session=session)
    assert decision.outcome == "allow"
    shown = credit("c3")
    history = [abandoned, asked(shown)]
    other = make_guard()
    other_session = other.session()
    assert other.check(shown, Trajectory(messages=history), session=other_session).outcome == "block"


def test_concurrent_checks_of_one_message_in_threads_allow_one_credit() -> None:
    guard = make_guard()
    session = guard.session()
    message = asked(*[credit(f"c{i}") for i in range(4)])
    outcomes: dict[str, str] = {}

    def check(cid: str) -> None:
        outcomes[cid] = guard.check(credit(cid), Trajectory(messages=[message]), session=session).outcome

    threads = [threading.Thread(target=check, args=(f"c{i}",)) for i in (3, 1, 2, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert list(outcomes.values()).count("allow") == 1
    assert outcomes["c0"] == "allow"  # the first issued is the one the history read once allows
