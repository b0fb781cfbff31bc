"""GuardedTools reads the loop's history faithfully: reused ids refused, calls judged in order, no stale conversion.

The checklist is the airline one's bag rule in small: bags can be added, never
removed, judged on the reservation as the last read or bag update returned it.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import GuardedTools, HardGate, Message, ToolCall, Trajectory, parse_checklist
from policyguard.errors import FormatError
from policyguard.guard.core import Guard
from policyguard.trajectory.canonical import policy_version

POLICY = "The user can add but not remove checked bags. Only the owner may cancel a reservation.\n"
CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: bags, version: "{policy_version(POLICY)}"}}
    facts:
      reservation:
        tool: get_reservation_details
        match: {{reservation_id: args.reservation_id}}
        refreshed_by: [update_reservation_baggages]
    tools:
      get_reservation_details: {{mutating: false}}
      update_reservation_baggages:
        requirements:
          - id: bags-add-only
            text: Checked bags can be added but not removed.
            kind: data
            source: The user can add but not remove checked bags.
            prerequisites: [get_reservation_details]
            check: args.total_baggages >= facts.reservation.total_baggages
      cancel_reservation:
        requirements:
          - id: cancel-owner
            text: Only the owner may cancel.
            kind: data
            source: Only the owner may cancel a reservation.
            prerequisites: [get_reservation_details]
            check: facts.reservation.user_id == "mia_li_3668"
    """
)


class Airline:
    """Two reservations and a log of the writes that really ran."""

    def __init__(self) -> None:
        self.db: dict[str, dict[str, Any]] = {
            "NO6JO3": {"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "total_baggages": 2},
            "T1QOBS": {"reservation_id": "T1QOBS", "user_id": "someone_else", "total_baggages": 0},
        }
        self.writes: list[tuple[str, Any]] = []

    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        return dict(self.db[reservation_id])

    def update_reservation_baggages(self, reservation_id: str, total_baggages: int) -> dict[str, Any]:
        self.writes.append(("bags", total_baggages))
        self.db[reservation_id]["total_baggages"] = total_baggages
        return dict(self.db[reservation_id])

    def cancel_reservation(self, reservation_id: str) -> str:
        self.writes.append(("cancel", reservation_id))
        return "cancelled"


@pytest.fixture
def airline() -> Airline:
    return Airline()


@pytest.fixture
def tools(airline: Airline) -> GuardedTools:
    checklist = parse_checklist(CHECKLIST)
    guard = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)
    functions = {
        "get_reservation_details": airline.get_reservation_details,
        "update_reservation_baggages": airline.update_reservation_baggages,
        "cancel_reservation": airline.cancel_reservation,
    }
    return GuardedTools(guard, functions)


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def turn(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def run_turn(
    tools: GuardedTools, messages: list[Any], *calls: dict[str, Any], append_each: bool
) -> list[dict[str, Any]]:
    """Run one assistant turn the way a loop does: append each result at once, or all at the end."""
    messages.append(turn(*calls))
    replies = []
    for tool_call in calls:
        reply = tools.openai_chat(tool_call, messages)
        replies.append(reply)
        if append_each:
            messages.append(reply)
    if not append_each:
        messages.extend(replies)
    return replies


def read_no6jo3(tools: GuardedTools) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": "I am mia_li_3668; change the bags on NO6JO3."}]
    run_turn(tools, messages, call("r1", "get_reservation_details", reservation_id="NO6JO3"), append_each=True)
    return messages


# -- several calls in one assistant message -------------------------------------


@pytest.mark.parametrize("append_each", [True, False], ids=["loop appends each result", "loop appends at the end"])
def test_bags_2_to_5_then_5_to_3_in_one_message_the_second_is_judged_after_the_first(tools, airline, append_each):
    """Judged on the state before the message, 3 >= 2 would pass and remove two bags."""
    messages = read_no6jo3(tools)
    up = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=5)
    down = call("b2", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3)
    first, second = run_turn(tools, messages, up, down, append_each=append_each)
    assert airline.writes == [("bags", 5)]
    assert json.loads(first["content"])["total_baggages"] == 5
    assert second["content"].startswith("Error:")


def test_a_call_whose_earlier_sibling_has_not_run_is_refused(tools, airline):
    messages = read_no6jo3(tools)
    up = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=5)
    down = call("b2", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3)
    messages.append(turn(up, down))
    reply = tools.openai_chat(down, messages)  # out of order: b1 has not run
    assert reply["tool_call_id"] == "b2" and "'b1'" in reply["content"] and reply["content"].startswith("Error:")
    assert airline.writes == []


def test_a_result_remembered_from_another_conversation_does_not_count(tools, airline):
    """Another history with the same call ids: its sibling has not run here, so the later call is refused."""
    messages = read_no6jo3(tools)
    up = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=5)
    down = call("b2", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=6)
    run_turn(tools, messages, up, down, append_each=True)
    other: list[Any] = [{"role": "user", "content": "hello"}, *messages[1:3], {"role": "user", "content": "more"}]
    other.append(turn(up, down))
    reply = tools.openai_chat(down, other)
    assert "'b1'" in reply["content"] and reply["content"].startswith("Error:")
    assert airline.writes == [("bags", 5), ("bags", 6)]


def test_run_with_a_trajectory_also_sees_the_results_of_earlier_siblings(tools, airline):
    read = ToolCall(id="r1", name="get_reservation_details", arguments={"reservation_id": "NO6JO3"})
    up = ToolCall(
        id="b1", name="update_reservation_baggages", arguments={"reservation_id": "NO6JO3", "total_baggages": 5}
    )
    down = up.model_copy(update={"id": "b2", "arguments": {"reservation_id": "NO6JO3", "total_baggages": 3}})
    history = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="r1", content=json.dumps(airline.db["NO6JO3"])),
            Message(role="assistant", tool_calls=[up, down]),
        ]
    )
    assert tools.run(up, history).executed
    outcome = tools.run(down, history)
    assert not outcome.executed and outcome.decision.verdict == "BLOCK"
    assert airline.writes == [("bags", 5)]


# -- reused call ids ------------------------------------------------------------


def test_two_reads_with_one_id_then_a_cancel_are_refused_not_paired_by_position(tools, airline):
    """NO6JO3's result must never stand as the fact for T1QOBS."""
    messages: list[Any] = [
        {"role": "user", "content": "cancel T1QOBS"},
        turn(
            call("r1", "get_reservation_details", reservation_id="NO6JO3"),
            call("r1", "get_reservation_details", reservation_id="T1QOBS"),
        ),
        {"role": "tool", "tool_call_id": "r1", "content": json.dumps(airline.db["NO6JO3"])},
    ]
    cancel = call("c1", "cancel_reservation", reservation_id="T1QOBS")
    messages.append(turn(cancel))
    with pytest.raises(FormatError, match=r"message 1: call id 'r1' is used by two calls"):
        tools.openai_chat(cancel, messages)
    assert airline.writes == []


def test_one_id_reused_by_a_later_message_before_it_is_answered_is_refused_naming_both(tools, airline):
    messages: list[Any] = [{"role": "user", "content": "I am mia_li_3668; change the bags on NO6JO3."}]
    first = call("r1", "get_reservation_details", reservation_id="NO6JO3")
    reuse = call("r1", "get_reservation_details", reservation_id="T1QOBS")
    messages += [turn(first), turn(reuse)]
    with pytest.raises(
        FormatError,
        match=r"call id 'r1' is used by two calls before the first is answered \(in message 1 and message 2\)",
    ):
        tools.openai_chat(reuse, messages)


def test_one_id_reused_after_it_was_answered_is_a_new_call_and_runs(tools, airline):
    messages = read_no6jo3(tools)
    reuse = call("r1", "get_reservation_details", reservation_id="T1QOBS")
    messages.append(turn(reuse))
    reply = tools.openai_chat(reuse, messages)
    assert reply["tool_call_id"] == "r1" and "T1QOBS" in reply["content"]


def test_two_results_for_one_id_are_refused(tools, airline):
    messages = read_no6jo3(tools)
    messages.append({"role": "tool", "tool_call_id": "r1", "content": json.dumps(airline.db["T1QOBS"])})
    cancel = call("c1", "cancel_reservation", reservation_id="T1QOBS")
    messages.append(turn(cancel))
    with pytest.raises(FormatError, match=r"call id 'r1' is answered by two results \(in message 2 and message 3\)"):
        tools.openai_chat(cancel, messages)


def test_run_refuses_a_trajectory_with_a_reused_id(tools):
    read = ToolCall(id="r1", name="get_reservation_details", arguments={"reservation_id": "NO6JO3"})
    history = Trajectory(
        messages=[
            Message(
                role="assistant", tool_calls=[read, read.model_copy(update={"arguments": {"reservation_id": "T1QOBS"}})]
            )
        ]
    )
    with pytest.raises(FormatError, match="call id 'r1' is used by two calls"):
        tools.run(ToolCall(id="c1", name="cancel_reservation", arguments={"reservation_id": "T1QOBS"}), history)


def test_a_call_already_answered_is_not_run_twice(tools, airline):
    messages = read_no6jo3(tools)
    up = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=5)
    run_turn(tools, messages, up, append_each=True)
    with pytest.raises(FormatError, match="call 'b1' is already answered"):
        tools.openai_chat(up, messages)
    assert airline.writes == [("bags", 5)]


def test_a_tool_call_that_differs_from_the_history_is_refused(tools, airline):
    messages = read_no6jo3(tools)
    messages.append(turn(call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=5)))
    other = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=0)
    with pytest.raises(FormatError, match="call 'b1' differs from the tool call given to check"):
        tools.openai_chat(other, messages)
    assert airline.writes == []


# -- arguments the guard cannot read -------------------------------------------


@pytest.mark.parametrize(
    "raw", ['{"reservation_id": "NO6JO3", "total_baggages": NaN}', '{"total_baggages": 1e999}', "{not json"]
)
def test_unreadable_arguments_get_an_error_result_and_the_loop_goes_on(tools, airline, raw):
    """A model writing NaN or broken JSON must not kill the loop, and the call must not run."""
    messages = read_no6jo3(tools)
    bad = {"id": "b1", "type": "function", "function": {"name": "update_reservation_baggages", "arguments": raw}}
    [reply] = run_turn(tools, messages, bad, append_each=True)
    assert reply["tool_call_id"] == "b1" and reply["content"].startswith("Error:") and "call 'b1'" in reply["content"]
    good = call("b2", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=4)
    [reply] = run_turn(tools, messages, good, append_each=True)
    assert json.loads(reply["content"])["total_baggages"] == 4
    assert airline.writes == [("bags", 4)]


def test_an_unreadable_call_with_a_successful_result_in_the_history_is_refused(tools):
    messages = read_no6jo3(tools)
    bad = {"id": "b1", "type": "function", "function": {"name": "update_reservation_baggages", "arguments": "{x"}}
    messages += [turn(bad), {"role": "tool", "tool_call_id": "b1", "content": '{"total_baggages": 9}'}]
    cancel = call("c1", "cancel_reservation", reservation_id="NO6JO3")
    messages.append(turn(cancel))
    with pytest.raises(FormatError, match="call 'b1' .* has unreadable arguments but a successful result"):
        tools.openai_chat(cancel, messages)


# -- incremental conversion -----------------------------------------------------


def test_an_earlier_result_changed_in_place_does_not_change_what_the_guard_knows(tools, airline):
    """The session record keeps the results the tools returned; the host can add to it, never rewrite it."""
    messages = read_no6jo3(tools)
    up = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3)
    run_turn(tools, messages, up, append_each=True)
    messages[2]["content"] = json.dumps({**airline.db["NO6JO3"], "total_baggages": 1})  # the read, edited in place
    messages[4]["content"] = "Error: the update failed"  # and the bag update "failed" after all
    down = call("b2", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=2)
    [reply] = run_turn(tools, messages, down, append_each=True)
    assert reply["content"].startswith("Error:")  # 2 < 3, what the update really returned
    assert airline.writes == [("bags", 3)]
    again = call("b3", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=4)
    [reply] = run_turn(tools, messages, again, append_each=True)
    assert not reply["content"].startswith("Error:")  # 4 >= 3
    assert airline.writes == [("bags", 3), ("bags", 4)]


def test_an_earlier_flag_retyped_in_place_is_not_read_again(tools, airline):
    """``False == 0`` in Python: a retyped flag in an old message changes nothing the record holds."""
    messages = read_no6jo3(tools)
    messages[2]["is_error"] = False
    run_turn(tools, messages, call("r2", "get_reservation_details", reservation_id="T1QOBS"), append_each=True)
    messages[2]["is_error"] = 0
    later = call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=2)
    [reply] = run_turn(tools, messages, later, append_each=True)
    assert not reply["content"].startswith("Error:")  # judged on the read as the tool returned it
    assert airline.writes == [("bags", 2)]


def test_a_shortened_or_rewritten_history_is_converted_again(tools, airline):
    messages = read_no6jo3(tools)
    run_turn(
        tools,
        messages,
        call("b1", "update_reservation_baggages", reservation_id="NO6JO3", total_baggages=3),
        append_each=True,
    )
    fresh: list[Any] = [{"role": "user", "content": "cancel T1QOBS"}]
    cancel = call("c1", "cancel_reservation", reservation_id="T1QOBS")
    [reply] = run_turn(tools, fresh, cancel, append_each=True)
    assert reply["content"].startswith("Error:")  # no read of T1QOBS in this history
    assert ("cancel", "T1QOBS") not in airline.writes


def test_each_call_converts_only_the_new_messages(tools, monkeypatch):
    from policyguard.trajectory.formats import chat_history

    converted: list[int] = []
    real = chat_history.read_plain_message

    def counting(item: Any, index: int, **kwargs: Any) -> Message:
        converted.append(index)
        return real(item, index, **kwargs)

    monkeypatch.setattr(chat_history, "read_plain_message", counting)
    messages = read_no6jo3(tools)
    assert converted == [0, 1]
    converted.clear()
    run_turn(tools, messages, call("r2", "get_reservation_details", reservation_id="T1QOBS"), append_each=True)
    assert converted == [2, 3]


# -- property: whatever the history, a tool message or a FormatError ------------

_IDS = st.sampled_from(["r1", "r2", "r3"])
_ARGUMENTS = st.sampled_from(
    ['{"reservation_id": "NO6JO3"}', '{"reservation_id": "T1QOBS"}', '{"reservation_id": NaN}', "{", '{"n": 1e999}']
)
_RESULTS = st.sampled_from(['{"reservation_id": "NO6JO3", "user_id": "mia_li_3668", "total_baggages": 2}', "Error: x"])
_FLAGS = st.sampled_from([None, True, False, "false", 0])


@st.composite
def _histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            calls = [
                {"id": draw(_IDS), "type": "function", "function": {"name": "get_reservation_details", "arguments": a}}
                for a in draw(st.lists(_ARGUMENTS, min_size=1, max_size=2))
            ]
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
        else:
            result: dict[str, Any] = {"role": "tool", "tool_call_id": draw(_IDS), "content": draw(_RESULTS)}
            flag = draw(_FLAGS)
            if flag is not None:
                result["is_error"] = flag
            out.append(result)
    return out


def _pairs_unambiguously(history: list[dict[str, Any]]) -> bool:
    """The pairing rule, written out: a result answers the newest unanswered call of its id."""
    open_ids: set[str] = set()
    answered: set[str] = set()
    for message in history:
        for tool_call in message.get("tool_calls") or []:
            if tool_call["id"] in open_ids:
                return False  # two unanswered calls (or one message) share the id
            open_ids.add(tool_call["id"])
            answered.discard(tool_call["id"])
        if message["role"] == "tool":
            call_id = message["tool_call_id"]
            if call_id in answered:
                return False  # a second result for an answered call
            open_ids.discard(call_id)
            answered.add(call_id)
    return True


def _never_run(**arguments: Any) -> None:
    raise AssertionError("only cancel_reservation is called here; the others are the checklist's host tools")


@settings(max_examples=100, deadline=None)
@given(history=_histories(), arguments=_ARGUMENTS)
def test_any_history_gives_a_tool_message_or_a_format_error_and_ambiguous_ids_never_run(history, arguments):
    airline = Airline()
    checklist = parse_checklist(CHECKLIST)
    guard = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)
    unused = {"get_reservation_details": _never_run, "update_reservation_baggages": _never_run}
    tools = GuardedTools(guard, {"cancel_reservation": airline.cancel_reservation, **unused})
    cancel = {"id": "c9", "type": "function", "function": {"name": "cancel_reservation", "arguments": arguments}}
    history.append(turn(cancel))
    try:
        reply = tools.openai_chat(cancel, history)
    except FormatError:
        assert airline.writes == []
        return
    assert _pairs_unambiguously(history), "an ambiguous id was accepted"
    assert reply["role"] == "tool" and reply["tool_call_id"] == "c9"
    if airline.writes:
        assert arguments == '{"reservation_id": "NO6JO3"}'  # the only cancel the owner rule can allow
