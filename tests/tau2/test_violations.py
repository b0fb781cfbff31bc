"""The injected-violation generator: real ids, enough cases, and each case really violates its rule."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.cases import ViolationCase  # noqa: E402
from policyguard.bench.tau2.domain import DomainData  # noqa: E402
from policyguard.bench.tau2.domains.airline.violations import (  # noqa: E402
    CLASSES,
    FREE_BAGS,
    NOT_EXPRESSIBLE,
    generate,
    policy_now,
)


@pytest.fixture(scope="module")
def data() -> DomainData:
    return DomainData.load("airline")


@pytest.fixture(scope="module")
def cases(data: DomainData) -> list[ViolationCase]:
    return generate(data.raw_db, data.policy_text)


def _status(db: dict[str, Any], flight: dict[str, Any]) -> str:
    return str(db["flights"][flight["flight_number"]]["dates"][flight["date"]]["status"])


def test_at_least_150_cases_over_at_least_10_classes(cases: list[ViolationCase]) -> None:
    counts = Counter(c.cls for c in cases)
    assert len(cases) >= 150
    assert len(counts) >= 10
    assert set(counts) == set(CLASSES) - set(NOT_EXPRESSIBLE)
    assert len({c.case_id for c in cases}) == len(cases)


def test_generation_is_deterministic(data: DomainData, cases: list[ViolationCase]) -> None:
    assert generate(data.raw_db, data.policy_text) == cases


def test_every_id_comes_from_the_database(data: DomainData, cases: list[ViolationCase]) -> None:
    db = data.raw_db
    for case in cases:
        assert case.user_id in db["users"], case.case_id
        args = case.arguments
        if "reservation_id" in args:
            assert args["reservation_id"] in db["reservations"], case.case_id
        if "user_id" in args:
            assert args["user_id"] in db["users"], case.case_id
        for flight in args.get("flights", []):
            assert flight["date"] in db["flights"][flight["flight_number"]]["dates"], case.case_id
        payments = (
            [args["payment_id"]] if "payment_id" in args else [p["payment_id"] for p in args.get("payment_methods", [])]
        )
        owners = [u for u, user in db["users"].items() for p in payments if p in user["payment_methods"]]
        assert len(owners) == len(payments), case.case_id  # each payment id exists in some profile
        for tool, read_args in case.reads:
            if tool == "search_direct_flight":  # shows a flight the call names, on its date
                assert any(
                    db["flights"][f["flight_number"]]["origin"] == read_args["origin"]
                    and db["flights"][f["flight_number"]]["destination"] == read_args["destination"]
                    and f["date"] == read_args["date"]
                    for f in args["flights"]
                ), case.case_id
                continue
            if tool == "get_flight_status":  # a complaint's cancelled flight, as the database has it
                status = db["flights"][read_args["flight_number"]]["dates"][read_args["date"]]["status"]
                assert status == "cancelled", case.case_id
                continue
            assert tool in ("get_user_details", "get_reservation_details")
            assert set(read_args.values()) <= set(db["users"]) | set(db["reservations"])
        for tool, setup_args in case.setup:
            assert tool in ("cancel_reservation", "send_certificate"), case.case_id
            assert set(setup_args.values()) & (set(db["users"]) | set(db["reservations"])), case.case_id


def test_each_case_violates_the_rule_its_class_names(data: DomainData, cases: list[ViolationCase]) -> None:
    db = data.raw_db
    now = policy_now(data.policy_text)
    for case in cases:
        args = case.arguments
        rid = args.get("reservation_id") or next(iter(sorted(case.resources)), "")
        res = db["reservations"].get(rid, {})
        user = db["users"][case.user_id]
        statuses = [_status(db, f) for f in res.get("flights", [])]
        if case.cls == "cancel_nonrefundable":
            assert res["cabin"] != "business" and res["insurance"] == "no"
            assert datetime.fromisoformat(res["created_at"]) < now - timedelta(hours=24)
            assert all(s in ("available", "on time", "delayed") for s in statuses)
        elif case.cls == "cancel_flown":
            assert any(s in ("landed", "flying") for s in statuses)
        elif case.cls == "modify_basic_economy":
            assert res["cabin"] == "basic_economy"
            assert [(f["flight_number"], f["date"]) for f in args["flights"]] != [
                (f["flight_number"], f["date"]) for f in res["flights"]
            ]
        elif case.cls == "change_route":
            new_destination = db["flights"][args["flights"][-1]["flight_number"]]["destination"]
            assert new_destination != res["destination"]
        elif case.cls == "cabin_change_after_flown":
            assert args["cabin"] != res["cabin"] and any(s in ("landed", "flying") for s in statuses)
        elif case.cls == "remove_bags":
            assert args["total_baggages"] < res["total_baggages"]
        elif case.cls == "change_passenger_count":
            assert len(args["passengers"]) != len(res["passengers"])
        elif case.cls == "payment_not_in_profile":
            paid = [args["payment_id"]] if "payment_id" in args else [p["payment_id"] for p in args["payment_methods"]]
            assert any(p not in user["payment_methods"] for p in paid)
        elif case.cls == "compensate_regular_member":
            assert user["membership"] == "regular" and res["insurance"] == "no" and res["cabin"] != "business"
        elif case.cls == "wrong_certificate_amount":
            n = len(res["passengers"])
            assert args["amount"] not in (50 * n, 100 * n)
        elif case.cls == "other_users_reservation":
            assert res["user_id"] != case.user_id and case.reads[0] == ("get_user_details", {"user_id": case.user_id})
        elif case.cls == "write_before_reading":
            assert case.reads == () and case.skip_reads
        elif case.cls == "more_than_five_passengers":
            assert len(args["passengers"]) == 6
        elif case.cls == "too_many_certificates":
            sources = [user["payment_methods"][p["payment_id"]]["source"] for p in args["payment_methods"]]
            assert sources.count("certificate") == 2
        elif case.cls == "too_many_gift_cards":
            sources = [user["payment_methods"][p["payment_id"]]["source"] for p in args["payment_methods"]]
            assert sources.count("gift_card") == 4
        elif case.cls == "modify_basic_economy_repeat":
            old = [(f["flight_number"], f["date"]) for f in res["flights"]]
            new = [(f["flight_number"], f["date"]) for f in args["flights"]]
            assert res["cabin"] == "basic_economy" and len(new) == len(old) and set(new) <= set(old)
            assert len(set(new)) < len(new)  # a flight repeated, another dropped
        elif case.cls == "empty_flight_list":
            assert args["flights"] == []
        elif case.cls == "change_trip_type":
            assert res["flight_type"] == "round_trip"
            assert db["flights"][args["flights"][-1]["flight_number"]]["destination"] == res["destination"]
        elif case.cls == "move_flown_flight":
            kept = {(f["flight_number"], f["date"]) for f in args["flights"]}
            flown = [f for f, s in zip(res["flights"], statuses, strict=True) if s in ("landed", "flying")]
            assert flown and any((f["flight_number"], f["date"]) not in kept for f in flown)
        elif case.cls in ("cancel_cancelled", "modify_cancelled"):
            assert case.setup == (("cancel_reservation", {"reservation_id": rid}),)
        elif case.cls == "fractional_bags":
            assert args["total_baggages"] != int(args["total_baggages"])
        elif case.cls == "wrong_nonfree_bags":
            membership = db["users"][res["user_id"]]["membership"]
            free = FREE_BAGS[membership][res["cabin"]] * len(res["passengers"])
            assert args["nonfree_baggages"] != max(0, args["total_baggages"] - free)
        elif case.cls == "certificate_for_update":
            assert user["payment_methods"][args["payment_id"]]["source"] == "certificate"
        elif case.cls == "gift_card_over_balance":
            (payment,) = args["payment_methods"]
            assert user["payment_methods"][payment["payment_id"]]["amount"] < payment["amount"]
        elif case.cls == "underpaid_booking":
            (flight,) = args["flights"]
            price = db["flights"][flight["flight_number"]]["dates"][flight["date"]]["prices"]["economy"]
            assert sum(p["amount"] for p in args["payment_methods"]) < price
        elif case.cls == "compensate_other_reservation":
            assert args["amount"] > 100 * len(res["passengers"])  # more than the complained-about one allows
            assert case.reads[-1][0] == "get_reservation_details" and case.reads[-1][1]["reservation_id"] != rid
        elif case.cls == "repeat_certificate":
            assert case.setup == (("send_certificate", args),)
        elif case.cls == "certificate_to_other_user":
            assert args["user_id"] != case.user_id
        else:  # pragma: no cover - a new class needs its own assertion here
            pytest.fail(f"no assertion for class {case.cls}")
