"""What a fact is: bound to its record, ordered by call, invalidated by writes, collected as lists.

Each test is a dialogue built message by message (calls and results placed
exactly where an adversarial agent or tool could put them) and the fact the
gate then believes - or the reason it believes none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, parse_checklist
from policyguard.errors import ChecklistError
from policyguard.gate.facts import FactsResult, resolve_facts
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.limits import MAX_RESULT_CHARS
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

HEADER = f'policy: {{name: p, version: "{policy_version("p")}"}}\n'


def checklist(facts: str) -> Checklist:
    return parse_checklist(HEADER + "facts:\n" + facts)


class Talk:
    """A trajectory written call by call; ``answer`` may come long after its call."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._n = 0

    def calls(self, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        ids = []
        tool_calls = []
        for name, args in calls:
            self._n += 1
            ids.append(f"c{self._n}")
            tool_calls.append(ToolCall(id=f"c{self._n}", name=name, arguments=args))
        self.messages.append(Message(role="assistant", tool_calls=tool_calls))
        return ids

    def answer(self, call_id: str, result: Any, *, is_error: bool = False) -> Talk:
        content = result if isinstance(result, str) else json.dumps(result)
        self.messages.append(Message(role="tool", tool_call_id=call_id, content=content, is_error=is_error))
        return self

    def call(self, name: str, args: dict[str, Any], result: Any = None, *, is_error: bool = False) -> str:
        (call_id,) = self.calls((name, args))
        if result is not None:
            self.answer(call_id, result, is_error=is_error)
        return call_id

    def trajectory(self) -> Trajectory:
        return Trajectory(messages=list(self.messages))


RESERVATION = """\
  reservation:
    tool: get_reservation_details
    match: {reservation_id: args.reservation_id}
    refreshed_by: [update_reservation_flights, cancel_reservation]
"""
CANCEL = ToolCall(id="pending", name="cancel_reservation", arguments={"reservation_id": "T1QOBS"})


def reservation(rid: str = "T1QOBS", **extra: Any) -> dict[str, Any]:
    return {"reservation_id": rid, "user_id": "mia", "cabin": "economy", **extra}


def resolve(checklist_: Checklist, talk: Talk, call: ToolCall = CANCEL, *names: str) -> FactsResult:
    return resolve_facts(checklist_, call, talk.trajectory(), set(names or checklist_.facts))


# --- binding -------------------------------------------------------------------------------


def test_a_read_that_returned_another_record_is_not_the_fact() -> None:
    """Asked for T1QOBS, got NO6JO3's JSON: not the reservation T1QOBS."""
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation("NO6JO3"))
    facts = resolve(checklist(RESERVATION), talk)
    assert "reservation" not in facts.values
    assert facts.missing["reservation"].startswith("the get_reservation_details result is for another record")


def test_a_record_without_its_id_field_is_not_the_fact() -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, {"user_id": "mia", "cabin": "economy"})
    assert "for another record" in resolve(checklist(RESERVATION), talk).missing["reservation"]


def test_a_bound_read_still_is_the_fact_after_a_mismatched_one() -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation())
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation("NO6JO3"))
    assert resolve(checklist(RESERVATION), talk).values["reservation"] == reservation()


def test_bind_names_the_record_field_by_a_dotted_path() -> None:
    facts = "  order:\n    tool: get_order\n    match: {id: args.order_id}\n    bind: {id: meta.order_id}\n"
    call = ToolCall(id="p", name="refund", arguments={"order_id": "O1"})
    good, other = Talk(), Talk()
    good.call("get_order", {"id": "O1"}, {"meta": {"order_id": "O1"}, "total": 5})
    other.call("get_order", {"id": "O1"}, {"meta": {"order_id": "O2"}, "total": 5})
    assert resolve(checklist(facts), good, call).values["order"]["total"] == 5
    assert "for another record" in resolve(checklist(facts), other, call).missing["order"]


def test_an_empty_bind_turns_binding_off() -> None:
    facts = "  approval:\n    tool: get_approval\n    match: {approval_id: args.approval_id}\n    bind: {}\n"
    call = ToolCall(id="p", name="refund", arguments={"approval_id": "A7"})
    talk = Talk()
    talk.call("get_approval", {"approval_id": "A7"}, {"amount": 10})
    assert resolve(checklist(facts), talk, call).values["approval"] == {"amount": 10}


def test_a_string_key_is_not_bound_by_a_number_or_a_bool() -> None:
    facts = "  flag:\n    tool: get_flag\n    match: {id: args.id}\n"
    call = ToolCall(id="p", name="set", arguments={"id": 1})
    talk = Talk()
    talk.call("get_flag", {"id": 1}, {"id": True})
    assert "for another record" in resolve(checklist(facts), talk, call).missing["flag"]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("    collect: all\n    bind: {order_id: order_id}\n", "bind only apply to collect: newest"),
        ("    collect: calls\n    invalidated_by: [x]\n", "invalidated_by only apply to collect: newest"),
        ("    collect: all\n    refreshed_by: [x]\n", "refreshed_by only apply to collect: newest"),
        ("    bind: {id: order_id}\n", "bind names argument(s) ['id'] that match does not compute"),
        ("    collect: latest\n", "collect"),
    ],
)
def test_options_that_cannot_apply_are_refused_at_load(extra: str, problem: str) -> None:
    with pytest.raises(ChecklistError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        checklist("  order:\n    tool: get_order\n    match: {order_id: args.order_id}\n" + extra)


# --- ordering and writes -------------------------------------------------------------------


def test_a_reread_called_before_a_write_is_not_newer_than_the_write() -> None:
    """The re-read's result is appended after the write's, but it was CALLED first."""
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(cabin="business"))
    (reread,) = talk.calls(("get_reservation_details", {"reservation_id": "T1QOBS"}))
    talk.call("update_reservation_flights", {"reservation_id": "T1QOBS"}, reservation(cabin="basic_economy"))
    talk.answer(reread, reservation(cabin="business"))
    assert resolve(checklist(RESERVATION), talk).values["reservation"]["cabin"] == "basic_economy"


def test_a_reread_called_before_a_text_write_leaves_the_fact_missing() -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(cabin="business"))
    (reread,) = talk.calls(("get_reservation_details", {"reservation_id": "T1QOBS"}))
    talk.call("update_reservation_flights", {"reservation_id": "T1QOBS"}, "Downgraded to basic economy.")
    talk.answer(reread, reservation(cabin="business"))
    missing = resolve(checklist(RESERVATION), talk).missing["reservation"]
    assert missing.startswith("update_reservation_flights changed the reservation after it was read")
    assert "result is not JSON" in missing
    assert missing.endswith('call get_reservation_details(reservation_id="T1QOBS") again')


@pytest.mark.parametrize(
    ("result", "is_error", "why"),
    [
        ("Error: payment declined", True, "the update_reservation_flights call failed (Error: payment declined)"),
        ("OK", False, "the update_reservation_flights result is not JSON"),
        (None, False, "the update_reservation_flights call has no result yet"),
        (reservation("NO6JO3"), False, "the update_reservation_flights result is for another record"),
        ('{"reservation_id": NaN}', False, "over a limit"),
    ],
)
def test_a_write_whose_result_cannot_be_read_invalidates_the_fact(result: Any, is_error: bool, why: str) -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation())
    talk.call("update_reservation_flights", {"reservation_id": "T1QOBS"}, result, is_error=is_error)
    facts = resolve(checklist(RESERVATION), talk)
    assert "reservation" not in facts.values
    assert why in facts.missing["reservation"]


def test_a_write_to_another_record_leaves_the_fact_in_force() -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation())
    talk.call("update_reservation_flights", {"reservation_id": "NO6JO3"}, "OK")
    assert resolve(checklist(RESERVATION), talk).values["reservation"] == reservation()


def test_a_read_after_the_unreadable_write_restores_the_fact() -> None:
    talk = Talk()
    talk.call("update_reservation_flights", {"reservation_id": "T1QOBS"}, "OK")
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(cabin="business"))
    assert resolve(checklist(RESERVATION), talk).values["reservation"]["cabin"] == "business"


USER = """\
  user:
    tool: get_user_details
    match: {user_id: args.user_id}
    invalidated_by: [book_reservation]
"""
BOOK = ToolCall(id="pending", name="book_reservation", arguments={"user_id": "mia", "payment_id": "certificate_1"})


def test_a_booking_after_the_profile_read_invalidates_the_profile() -> None:
    """The certificate the first booking spent must not be spendable again on the stale profile."""
    talk = Talk()
    talk.call("get_user_details", {"user_id": "mia"}, {"user_id": "mia", "certificate_1": 100})
    talk.call("book_reservation", {"user_id": "mia", "payment_id": "certificate_1"}, {"reservation_id": "NEW1"})
    missing = resolve(checklist(USER), talk, BOOK).missing["user"]
    assert missing == 'book_reservation changed the user after it was read: call get_user_details(user_id="mia") again'


def test_a_write_sharing_no_key_invalidates_and_one_for_another_key_does_not() -> None:
    anonymous, other = Talk(), Talk()
    for talk in (anonymous, other):
        talk.call("get_user_details", {"user_id": "mia"}, {"user_id": "mia"})
    anonymous.call("book_reservation", {"payment_id": "certificate_1"}, {"reservation_id": "NEW1"})
    other.call("book_reservation", {"user_id": "noah"}, {"reservation_id": "NEW2"})
    assert "user" in resolve(checklist(USER), anonymous, BOOK).missing
    assert resolve(checklist(USER), other, BOOK).values["user"] == {"user_id": "mia"}


def test_a_reread_after_the_booking_is_the_fact_again() -> None:
    talk = Talk()
    talk.call("get_user_details", {"user_id": "mia"}, {"user_id": "mia", "certificate_1": 100})
    talk.call("book_reservation", {"user_id": "mia"}, {"reservation_id": "NEW1"})
    talk.call("get_user_details", {"user_id": "mia"}, {"user_id": "mia"})
    assert resolve(checklist(USER), talk, BOOK).values["user"] == {"user_id": "mia"}


def test_the_pending_call_and_calls_after_it_do_not_count() -> None:
    """A trajectory may already hold the pending call; it cannot invalidate (or feed) its own facts."""
    talk = Talk()
    talk.call("get_user_details", {"user_id": "mia"}, {"user_id": "mia"})
    talk.messages.append(Message(role="assistant", tool_calls=[BOOK]))
    assert resolve(checklist(USER), talk, BOOK).values["user"] == {"user_id": "mia"}


# --- why a fact is missing -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "is_error", "why"),
    [
        ("Error: not found", True, "the get_reservation_details call failed (Error: not found)"),
        ("Reservation T1QOBS: economy", False, "the get_reservation_details result is not JSON"),
        (
            "[" * 100 + "]" * 100,
            False,
            "the get_reservation_details result is over a limit (nested deeper than 64 levels",
        ),
        (
            json.dumps({"reservation_id": "T1QOBS", "pad": "x" * MAX_RESULT_CHARS}),
            False,
            "the get_reservation_details result is over a limit (",
        ),
        (
            '{"reservation_id": "T1QOBS", "n": Infinity}',
            False,
            "the get_reservation_details result is over a limit (Infinity is not a JSON number)",
        ),
    ],
)
def test_a_missing_fact_says_why_the_read_made_is_not_it(result: Any, is_error: bool, why: str) -> None:
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, result, is_error=is_error)
    facts = resolve(checklist(RESERVATION), talk)
    assert facts.missing["reservation"].startswith(why)
    assert "never_read" not in facts.missing and "reservation" not in facts.never_read


def test_no_read_at_all_is_reported_as_the_read_to_make() -> None:
    facts = resolve(checklist(RESERVATION), Talk())
    assert facts.missing["reservation"] == 'call get_reservation_details(reservation_id="T1QOBS") first'
    assert facts.never_read == {"reservation"}


# --- collect: all and calls ----------------------------------------------------------------

SEARCHES = """\
  found:
    tool: search_direct_flight
    also: [search_onestop_flight]
    collect: all
"""


def test_collect_all_lists_every_readable_result_in_call_order() -> None:
    talk = Talk()
    talk.call("search_direct_flight", {"origin": "JFK"}, [{"flight_number": "HAT1"}])
    talk.call("search_direct_flight", {"origin": "LAX"}, "Error: no flights", is_error=True)
    talk.call("search_onestop_flight", {"origin": "SFO"}, [[{"flight_number": "HAT2"}, {"flight_number": "HAT3"}]])
    talk.call("search_direct_flight", {"origin": "ORD"}, "no flights today")
    talk.call("search_direct_flight", {"origin": "BOS"}, '[{"n": NaN}]')
    call = ToolCall(id="p", name="update_reservation_flights", arguments={})
    assert resolve(checklist(SEARCHES), talk, call).values["found"] == [
        [{"flight_number": "HAT1"}],
        [[{"flight_number": "HAT2"}, {"flight_number": "HAT3"}]],
    ]


def test_collect_all_is_an_empty_list_not_a_missing_fact() -> None:
    facts = resolve(checklist(SEARCHES), Talk(), ToolCall(id="p", name="x", arguments={}))
    assert facts.values == {"found": []} and facts.missing == {}


def test_collect_all_keeps_only_calls_whose_arguments_match() -> None:
    facts = "  seen:\n    tool: get_order\n    match: {order_id: args.order_id}\n    collect: all\n"
    talk = Talk()
    talk.call("get_order", {"order_id": "O1"}, {"order_id": "O1"})
    talk.call("get_order", {"order_id": "O2"}, {"order_id": "O2"})
    call = ToolCall(id="p", name="x", arguments={"order_id": "O1"})
    assert resolve(checklist(facts), talk, call).values["seen"] == [{"order_id": "O1"}]


SENT = """\
  sent:
    tool: send_certificate
    collect: calls
"""


def test_collect_calls_lists_every_call_answered_or_not() -> None:
    talk = Talk()
    talk.call("send_certificate", {"user_id": "mia", "amount": 100}, "Certificate certificate_9 added.")
    talk.call("send_certificate", {"user_id": "mia", "amount": 50}, "Error: too much", is_error=True)
    talk.calls(("send_certificate", {"user_id": "mia", "amount": 25}))
    talk.call("send_certificate", {"user_id": "mia", "amount": 10}, {"ok": True})
    pending = ToolCall(id="pending", name="send_certificate", arguments={"user_id": "mia", "amount": 5})
    assert resolve(checklist(SENT), talk, pending).values["sent"] == [
        {"args": {"user_id": "mia", "amount": 100}, "result": None, "error": False},
        {"args": {"user_id": "mia", "amount": 50}, "result": None, "error": True},
        {"args": {"user_id": "mia", "amount": 25}, "result": None, "error": False},
        {"args": {"user_id": "mia", "amount": 10}, "result": {"ok": True}, "error": False},
    ]


def test_at_most_one_certificate_per_conversation_is_checkable() -> None:
    from policyguard.gate.hardgate import HardGate
    from policyguard.stages import CheckContext

    text = (
        HEADER
        + "facts:\n"
        + SENT
        + "tools:\n  send_certificate:\n    requirements:\n"
        + "      - {id: one-cert, text: One certificate., kind: data, source: s,"
        + " check: 'facts.sent.filter(c, !c.error).size() == 0'}\n"
    )
    gate = HardGate(parse_checklist(text))
    pending = ToolCall(id="pending", name="send_certificate", arguments={"user_id": "mia", "amount": 5})
    context = CheckContext(checklist=gate.checklist, policy_text="", now=None)
    first = Talk()
    first.messages.append(Message(role="assistant", tool_calls=[pending]))
    assert gate.check(pending, first.trajectory(), context).outcome == "escalate"
    again = Talk()
    again.call("send_certificate", {"user_id": "mia", "amount": 100}, "Certificate added.")
    assert gate.check(pending, again.trajectory(), context).outcome == "block"


# --- duplicate call ids --------------------------------------------------------------------


def _gate_and_context() -> tuple[Any, Any]:
    from policyguard.gate.hardgate import HardGate
    from policyguard.stages import CheckContext

    text = (
        HEADER
        + "facts:\n"
        + RESERVATION
        + "tools:\n  get_reservation_details: {mutating: false}\n  cancel_reservation:\n    requirements:\n"
        + "      - {id: own, text: Own only., kind: data, source: s, check: 'facts.reservation.user_id == \"mia\"'}\n"
    )
    gate = HardGate(parse_checklist(text))
    return gate, CheckContext(checklist=gate.checklist, policy_text="", now=None)


def test_two_reads_with_one_id_in_one_message_are_refused_not_paired_by_position() -> None:
    """Reads of NO6JO3 (mia's) and T1QOBS (noah's) share an id: neither answer may stand for T1QOBS."""
    gate, context = _gate_and_context()
    calls = [
        ToolCall(id="dup", name="get_reservation_details", arguments={"reservation_id": "NO6JO3"}),
        ToolCall(id="dup", name="get_reservation_details", arguments={"reservation_id": "T1QOBS"}),
    ]
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=calls),
            Message(role="tool", tool_call_id="dup", content=json.dumps(reservation("T1QOBS", user_id="noah"))),
            Message(role="tool", tool_call_id="dup", content=json.dumps(reservation("T1QOBS", user_id="mia"))),
        ]
    )
    decision = gate.check(CANCEL, trajectory, context)
    assert decision.outcome == "block" and decision.stage == "gate"
    assert "tool call id 'dup' is used by two calls" in (decision.message or "")


def test_a_call_id_reused_in_a_later_message_before_it_is_answered_is_refused() -> None:
    gate, context = _gate_and_context()
    talk = Talk()
    first = talk.call("get_reservation_details", {"reservation_id": "T1QOBS"})
    talk.messages.append(
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=first, name="get_reservation_details", arguments={"reservation_id": "T1QOBS"})],
        )
    )
    talk.answer(first, reservation(user_id="mia"))
    decision = gate.check(CANCEL, talk.trajectory(), context)
    assert decision.outcome == "block" and f"tool call id {first!r} is used by two calls" in (decision.message or "")


def test_a_call_id_reused_after_it_was_answered_pairs_each_result_with_its_own_call() -> None:
    """noah's read answered first; the reused id's result (mia's, newer) is the fact; a second answer is refused."""
    gate, context = _gate_and_context()
    talk = Talk()
    first = talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(user_id="noah"))
    talk.messages.append(
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=first, name="get_reservation_details", arguments={"reservation_id": "T1QOBS"})],
        )
    )
    assert gate.check(CANCEL, talk.trajectory(), context).outcome == "block"  # only noah's record is answered
    talk.answer(first, reservation(user_id="mia"))
    assert gate.check(CANCEL, talk.trajectory(), context).outcome == "escalate"
    talk.answer(first, reservation(user_id="noah"))
    decision = gate.check(CANCEL, talk.trajectory(), context)
    assert decision.outcome == "block" and f"tool call id {first!r} has two results" in (decision.message or "")


def test_two_results_for_one_call_are_refused() -> None:
    gate, context = _gate_and_context()
    talk = Talk()
    read = talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(user_id="noah"))
    talk.answer(read, reservation(user_id="mia"))
    decision = gate.check(CANCEL, talk.trajectory(), context)
    assert decision.outcome == "block" and f"tool call id {read!r} has two results" in (decision.message or "")


def test_call_ids_lists_every_call_made() -> None:
    talk = Talk()
    talk.calls(("a", {}), ("b", {}))
    talk.call("c", {}, "done")
    assert [s.call.id for s in talk.trajectory().call_sites()] == ["c1", "c2", "c3"]
    assert talk.trajectory().duplicate_call_id() is None


def test_the_gate_tells_the_agent_why_a_read_it_made_is_not_enough() -> None:
    """Not "read the reservation first" after a read was made: the agent would loop re-making it."""
    gate, context = _gate_and_context()
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, "Error: database busy", is_error=True)
    decision = gate.check(CANCEL, talk.trajectory(), context)
    assert decision.outcome == "block"
    assert decision.message == (
        "The reservation needed to check this action is not available: the get_reservation_details call failed"
        ' (Error: database busy): call get_reservation_details(reservation_id="T1QOBS")'
        " (a successful read of this record) first."
    )


def test_a_pending_call_whose_id_an_earlier_different_call_used_is_refused() -> None:
    """Otherwise the facts would be cut at the earlier call and the calls after it forgotten."""
    gate, context = _gate_and_context()
    talk = Talk()
    talk.messages.append(
        Message(role="assistant", tool_calls=[ToolCall(id=CANCEL.id, name="calculate", arguments={"e": "1"})])
    )
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(user_id="mia"))
    decision = gate.check(CANCEL, talk.trajectory(), context)
    assert decision.outcome == "block"
    assert "tool call id 'pending' is used by an earlier, different call" in (decision.message or "")


def test_the_pending_call_itself_in_the_trajectory_is_not_a_duplicate() -> None:
    gate, context = _gate_and_context()
    talk = Talk()
    talk.call("get_reservation_details", {"reservation_id": "T1QOBS"}, reservation(user_id="mia"))
    talk.messages.append(Message(role="assistant", tool_calls=[CANCEL]))
    assert gate.check(CANCEL, talk.trajectory(), context).outcome == "escalate"
