"""What a write makes stale, and who the user is: the facts issue 19 made precise, each with the attack it keeps out.

A profile is two facts in the shipped airline checklist: the ids, kinds and
membership no write changes (`user`, `owner`) and the balances that bookings and
paid updates spend (`user_balances`, `owner_balances`, narrowed by
`invalidated_when`). Lookups that answer with a bare id are scalar facts, and
the principal is the first user a trusted result establishes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import Checklist, load_checklist, parse_checklist
from policyguard.gate.facts import resolve_facts, resolve_principal
from policyguard.resources import shipped_checklist
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

MIA = "mia_li_3668"
GIFT, CARD, CERT = "gift_card_1", "credit_card_1", "certificate_1"


def profile(gift: float = 200, cert: float | None = 100) -> dict[str, Any]:
    methods: dict[str, Any] = {
        GIFT: {"source": "gift_card", "amount": gift, "id": GIFT},
        CARD: {"source": "credit_card", "id": CARD},
    }
    if cert is not None:
        methods[CERT] = {"source": "certificate", "amount": cert, "id": CERT}
    return {"user_id": MIA, "membership": "gold", "payment_methods": methods}


class Talk:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.n = 0

    def user(self, text: str) -> Talk:
        self.messages.append(Message(role="user", content=text))
        return self

    def call(self, name: str, args: dict[str, Any], result: Any = None, *, error: bool = False) -> Talk:
        self.n += 1
        call_id = f"c{self.n}"
        self.messages.append(Message(role="assistant", tool_calls=[ToolCall(id=call_id, name=name, arguments=args)]))
        if result is not None:
            content = result if isinstance(result, str) else json.dumps(result)
            self.messages.append(Message(role="tool", tool_call_id=call_id, content=content, is_error=error))
        return self

    def trajectory(self) -> Trajectory:
        return Trajectory(messages=list(self.messages))


@pytest.fixture(scope="module")
def airline() -> Checklist:
    return load_checklist(shipped_checklist("airline"))


def booking(*payments: tuple[str, float]) -> ToolCall:
    methods = [{"payment_id": p, "amount": a} for p, a in payments]
    return ToolCall(id="pending", name="book_reservation", arguments={"user_id": MIA, "payment_methods": methods})


def facts_for(checklist: Checklist, call: ToolCall, talk: Talk, *names: str) -> Any:
    return resolve_facts(checklist, call, talk.trajectory(), set(names), principal=MIA)


# -- balances: re-read only what a write spent ---------------------------------------


def test_a_booking_paid_by_card_leaves_the_gift_card_balance_in_force(airline: Checklist) -> None:
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("book_reservation", {"user_id": MIA, "payment_methods": [{"payment_id": CARD, "amount": 300}]}, {})
    facts = facts_for(airline, booking((GIFT, 50)), talk, "user", "user_balances")
    assert facts.values["user_balances"]["payment_methods"][GIFT]["amount"] == 200


def test_a_spent_gift_card_balance_is_not_reused_for_a_second_booking(airline: Checklist) -> None:
    """Attack: read 200, spend 150, book again with 150 on the same card: the balance must be read again."""
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("book_reservation", {"user_id": MIA, "payment_methods": [{"payment_id": GIFT, "amount": 150}]}, {})
    facts = facts_for(airline, booking((GIFT, 150)), talk, "user", "user_balances")
    assert "user_balances" in facts.missing and "changed the user_balances" in facts.missing["user_balances"]
    assert facts.values["user"]["membership"] == "gold"  # what no write changes stays in force


def test_a_certificate_spent_by_a_booking_is_not_reused(airline: Checklist) -> None:
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("book_reservation", {"user_id": MIA, "payment_methods": [{"payment_id": CERT, "amount": 100}]}, {})
    assert "user_balances" in facts_for(airline, booking((CERT, 100)), talk, "user_balances").missing


def test_a_paid_flight_change_makes_the_gift_card_balance_stale_for_the_next_booking(airline: Checklist) -> None:
    """Attack: stale balance after a paid change (the change returns the reservation, not the profile)."""
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("update_reservation_flights", {"reservation_id": "R1", "payment_id": GIFT, "flights": []}, {})
    assert "user_balances" in facts_for(airline, booking((GIFT, 10)), talk, "user_balances").missing


def test_a_write_answered_with_an_error_spent_nothing(airline: Checklist) -> None:
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call(
        "book_reservation",
        {"user_id": MIA, "payment_methods": [{"payment_id": GIFT, "amount": 150}]},
        "Error: Payment amount does not add up",
        error=True,
    )
    assert facts_for(airline, booking((GIFT, 150)), talk, "user_balances").values["user_balances"]


def test_a_write_with_no_result_yet_may_have_spent(airline: Checklist) -> None:
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("book_reservation", {"user_id": MIA, "payment_methods": [{"payment_id": GIFT, "amount": 150}]})
    assert "user_balances" in facts_for(airline, booking((GIFT, 150)), talk, "user_balances").missing


def test_a_write_whose_spend_cannot_be_read_invalidates_fail_closed(airline: Checklist) -> None:
    talk = Talk().call("get_user_details", {"user_id": MIA}, profile())
    talk.call("book_reservation", {"user_id": MIA, "payment_methods": "gift_card_1"}, {})
    assert "user_balances" in facts_for(airline, booking((GIFT, 1)), talk, "user_balances").missing


BASE = f'policy: {{name: p, version: "{policy_version("p")}"}}\n'


def test_failed_writes_change_something_unless_the_checklist_says_the_tools_refuse_first() -> None:
    text = BASE + (
        "facts:\n  order:\n    tool: get_order\n    match: {order_id: args.order_id}\n    invalidated_by: [refund]\n"
    )
    talk = Talk().call("get_order", {"order_id": "O1"}, {"order_id": "O1", "refunded": 0})
    talk.call("refund", {"order_id": "O1"}, "Error: timed out", error=True)
    call = ToolCall(id="p", name="refund", arguments={"order_id": "O1"})
    default = parse_checklist(text)
    assert "order" in resolve_facts(default, call, talk.trajectory(), {"order"}).missing
    refusing = parse_checklist(text + "    failed_writes_change_nothing: true\n")
    assert resolve_facts(refusing, call, talk.trajectory(), {"order"}).values["order"]["refunded"] == 0


def test_invalidated_when_is_checked_at_load() -> None:
    from policyguard.errors import ChecklistError
    from policyguard.gate.hardgate import HardGate

    text = BASE + (
        "facts:\n  order:\n    tool: get_order\n    match: {order_id: args.order_id}\n"
        "    invalidated_by: [refund]\n    invalidated_when: principal == write.x\n"
        "tools:\n  get_order: {mutating: false}\n"
    )
    with pytest.raises(ChecklistError, match="invalidated_when of fact 'order' uses unknown variable"):
        HardGate(parse_checklist(text))
    with pytest.raises(ChecklistError, match="invalidated_when narrows invalidated_by"):
        parse_checklist(BASE + "facts:\n  order: {tool: get_order, invalidated_when: 'true'}\n")


# A ledger the property drives: the true balance of one gift card, and what the dialogue shows of it.
_STEP = st.one_of(
    st.tuples(st.just("read")),
    st.tuples(st.just("spend"), st.sampled_from([GIFT, CARD, CERT]), st.integers(1, 300), st.booleans()),
    st.tuples(st.just("change"), st.sampled_from([GIFT, CARD]), st.integers(-100, 300), st.booleans()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, max_size=8), amount=st.integers(1, 400), method=st.sampled_from([GIFT, CERT]))
def test_no_sequence_of_reads_and_writes_shows_a_balance_above_what_is_left(
    airline: Checklist, steps: list[tuple[Any, ...]], amount: int, method: str
) -> None:
    """Whatever reads, bookings and paid changes came before (succeeded, failed or unanswered), the balance
    the gate would check a spend against is never more than the card really holds."""
    balances = {GIFT: 200.0, CERT: 100.0}
    talk = Talk()
    for step in steps:
        if step[0] == "read":
            cert = balances.get(CERT)
            talk.call("get_user_details", {"user_id": MIA}, profile(balances[GIFT], cert))
        elif step[0] == "spend":
            _, paid, spent, ok = step
            args = {"user_id": MIA, "payment_methods": [{"payment_id": paid, "amount": spent}]}
            if ok and paid in balances and balances[paid] >= spent:
                balances[paid] -= spent
                if paid == CERT:
                    del balances[CERT]  # tau2 removes a certificate once it pays
                talk.call("book_reservation", args, {"reservation_id": "NEW"})
            elif ok:
                talk.call("book_reservation", args)  # no answer: the fate is unknown, it may have spent
                if paid in balances:
                    balances[paid] -= min(spent, balances[paid])
            else:
                talk.call("book_reservation", args, "Error: refused", error=True)
        else:
            _, paid, price, ok = step
            args = {"reservation_id": "R1", "payment_id": paid, "flights": []}
            if ok and paid == GIFT and balances[GIFT] >= price:
                balances[GIFT] -= price  # a negative price is a refund to the card
                talk.call("update_reservation_flights", args, {"reservation_id": "R1"})
            else:
                talk.call("update_reservation_flights", args, "Error: refused", error=True)
    facts = facts_for(airline, booking((method, amount)), talk, "user_balances")
    shown = facts.values.get("user_balances")
    if shown is None:
        return  # missing: the gate asks for a fresh read
    entry = shown["payment_methods"].get(method)
    if entry is not None:
        assert method in balances and entry["amount"] <= balances[method], (entry, balances)


# -- scalar facts and the principal ------------------------------------------------------


def principal_checklist(extra: str) -> Checklist:
    return parse_checklist(BASE + extra)


LOOKUPS = (
    "principal: {tool: get_user_details, field: user_id, lookups: [find_user_id_by_email]}\n"
    "facts:\n  lookups: {tool: find_user_id_by_email, collect: calls, scalar: true}\n"
)


def test_a_lookup_answered_with_the_bare_id_authenticates_that_user_and_is_read_as_text() -> None:
    checklist = principal_checklist(LOOKUPS)
    talk = Talk().call("find_user_id_by_email", {"email": "mia@example.com"}, "mia_li_3668")
    assert resolve_principal(checklist, talk.trajectory(), None) == MIA
    call = ToolCall(id="p", name="cancel", arguments={})
    [entry] = resolve_facts(checklist, call, talk.trajectory(), {"lookups"}).values["lookups"]
    assert entry["result"] == MIA and entry["error"] is False


def test_the_first_user_located_stays_the_principal_when_the_agent_looks_up_another() -> None:
    """One user per conversation: locating B after A does not make B's orders A's."""
    checklist = principal_checklist(LOOKUPS)
    talk = Talk().call("find_user_id_by_email", {"email": "mia@example.com"}, MIA)
    talk.call("find_user_id_by_email", {"email": "bob@example.com"}, "bob_9")
    talk.call("get_user_details", {"user_id": "bob_9"}, {"user_id": "bob_9"})
    assert resolve_principal(checklist, talk.trajectory(), None) == MIA


@pytest.mark.parametrize(
    ("answer", "error"),
    [("Error: User not found", True), ("two words", False), ("", False), ('{"user_id": "x"}', False)],
)
def test_a_lookup_that_did_not_answer_with_an_id_authenticates_nobody(answer: str, error: bool) -> None:
    talk = Talk().call("find_user_id_by_email", {"email": "mia@example.com"}, answer, error=error)
    assert resolve_principal(principal_checklist(LOOKUPS), talk.trajectory(), None) is None


def test_a_bare_text_result_is_not_json_unless_the_fact_is_scalar() -> None:
    checklist = principal_checklist("facts:\n  status: {tool: get_flight_status, collect: all}\n")
    talk = Talk().call("get_flight_status", {"flight_number": "HAT1"}, "delayed")
    call = ToolCall(id="p", name="x", arguments={})
    assert resolve_facts(checklist, call, talk.trajectory(), {"status"}).values["status"] == []


STATED = (
    "principal: {tool: get_user_details, field: user_id, stated: {tool: get_reservation_details, field: user_id}}\n"
)


def reservation_read(talk: Talk, user_id: str = MIA) -> Talk:
    return talk.call("get_reservation_details", {"reservation_id": "R1"}, {"reservation_id": "R1", "user_id": user_id})


def test_the_users_own_id_on_the_reservation_they_named_establishes_them() -> None:
    talk = reservation_read(Talk().user("My user ID is\u202fmia_li_3668 and the reservation is R1."))
    assert resolve_principal(principal_checklist(STATED), talk.trajectory(), None) == MIA


@pytest.mark.parametrize(
    "said",
    [
        "My reservation is R1.",  # the user never gave an id: the record alone names nobody
        "My user ID is mia_li_36689.",  # another id that merely starts the same
        "My user ID is xmia_li_3668.",
    ],
)
def test_a_record_whose_user_id_the_user_did_not_write_establishes_nobody(said: str) -> None:
    talk = reservation_read(Talk().user(said))
    assert resolve_principal(principal_checklist(STATED), talk.trajectory(), None) is None


def test_the_id_must_come_from_the_user_before_the_read_not_from_the_agent() -> None:
    talk = Talk().user("Reservation R1 please.")
    talk.messages.append(Message(role="assistant", content="Are you mia_li_3668?"))
    reservation_read(talk).user("Yes, I am mia_li_3668.")  # said only after the record showed it
    assert resolve_principal(principal_checklist(STATED), talk.trajectory(), None) is None


def test_a_lookup_before_the_stated_record_wins_and_a_later_record_switches_nobody() -> None:
    talk = Talk().user("I am mia_li_3668; also bob_9 is my friend.")
    talk.call("get_user_details", {"user_id": MIA}, {"user_id": MIA})
    reservation_read(talk, "bob_9")
    assert resolve_principal(principal_checklist(STATED), talk.trajectory(), None) == MIA
