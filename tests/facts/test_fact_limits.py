"""Results past the documented limits are not facts: a bounded, fast refusal, never a crash."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, FactSource, load_checklist, parse_checklist
from policyguard.gate.facts import resolve_facts
from policyguard.gate.hardgate import HardGate
from policyguard.resources import shipped_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

USER = {
    "user_id": "mia_li_3668",
    "membership": "gold",
    "payment_methods": {"credit_card_1": {"source": "credit_card", "id": "credit_card_1"}},
}
RESERVATION = {
    "reservation_id": "T1QOBS",
    "user_id": "mia_li_3668",
    "cabin": "economy",
    "insurance": "yes",
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "flights": [{"flight_number": "HAT1", "date": "2024-05-20", "price": 100}],
    "created_at": "2024-05-14T10:00:00",
    "status": None,
}
CERTIFICATE = ToolCall(id="p1", name="send_certificate", arguments={"user_id": "mia_li_3668", "amount": 50})


@pytest.fixture(scope="module")
def airline() -> Checklist:
    return load_checklist(shipped_checklist("airline"))


def dialogue(*reads: tuple[str, dict[str, Any], str]) -> Trajectory:
    messages: list[Message] = []
    for n, (tool, args, content) in enumerate(reads):
        messages.append(Message(role="assistant", tool_calls=[ToolCall(id=f"r{n}", name=tool, arguments=args)]))
        messages.append(Message(role="tool", tool_call_id=f"r{n}", content=content))
    return Trajectory(messages=messages)


def deep(levels: int) -> str:
    return '{"reservation_id": ' * levels + '"T1QOBS"' + "}" * levels


def check(airline: Checklist, trajectory: Trajectory, call: ToolCall = CERTIFICATE) -> Any:
    context = CheckContext(checklist=airline, policy_text="", now=airline.clock)
    return HardGate(airline).check(call, trajectory, context)


@pytest.mark.parametrize("levels", [1_000, 10_000])
def test_a_deeply_nested_read_result_is_not_a_fact_and_no_recursion_error(airline: Checklist, levels: int) -> None:
    """~1,000 levels of nesting in the newest reservation read made every certificate a RecursionError."""
    trajectory = dialogue(
        ("get_user_details", {"user_id": "mia_li_3668"}, json.dumps(USER)),
        ("get_reservation_details", {"reservation_id": "T1QOBS"}, json.dumps(RESERVATION)),
        ("get_reservation_details", {"reservation_id": "T1QOBS"}, deep(levels)),
    )
    decision = check(airline, trajectory)
    assert decision.outcome == "block" and decision.stage == "gate", decision.error
    assert "nested deeper than 64 levels" in (decision.message or "")


def test_a_105_mb_read_result_is_refused_fast_and_names_the_limit(airline: Checklist) -> None:
    huge = json.dumps({"reservation_id": "T1QOBS", "pad": ["x" * 100] * 1_000_000})  # ~105 MB
    trajectory = dialogue(
        ("get_user_details", {"user_id": "mia_li_3668"}, json.dumps(USER)),
        ("get_reservation_details", {"reservation_id": "T1QOBS"}, huge),
    )
    started = time.perf_counter()
    decision = check(airline, trajectory)
    took = time.perf_counter() - started
    assert decision.outcome == "block" and "characters is over the limit of 1,000,000" in (decision.message or "")
    assert took < 1.0  # 16 s on the old code, which parsed it and handed it to CEL


def test_an_unreadable_newest_read_of_an_unkeyed_fact_does_not_fall_back_to_an_older_record() -> None:
    """``discussed_reservation`` is the newest read; an older read is another reservation, not a fallback."""
    checklist = parse_checklist(
        f'policy: {{name: p, version: "{policy_version("p")}"}}\n'
        "facts:\n  discussed:\n    tool: get_reservation_details\n    match: {}\n"
    )
    trajectory = dialogue(
        ("get_reservation_details", {"reservation_id": "INSURED"}, json.dumps({"reservation_id": "INSURED"})),
        ("get_reservation_details", {"reservation_id": "BASIC"}, "Reservation BASIC: basic economy"),
    )
    facts = resolve_facts(checklist, CERTIFICATE, trajectory, {"discussed"})
    assert facts.missing["discussed"].startswith("the newest get_reservation_details read cannot be used")


class Deep:
    """A resolver answering with a value past the limits."""

    def resolve(self, fact_name: str, source: FactSource, keys: dict[str, Any]) -> Any | None:
        value: Any = 1
        for _ in range(200):
            value = {"a": value}
        return value


def test_a_resolver_value_past_the_limits_is_not_a_fact() -> None:
    checklist = parse_checklist(
        f'policy: {{name: p, version: "{policy_version("p")}"}}\n'
        "facts:\n  order:\n    tool: get_order\n    match: {order_id: args.order_id}\n"
    )
    call = ToolCall(id="p", name="refund", arguments={"order_id": "O1"})
    facts = resolve_facts(checklist, call, Trajectory(), {"order"}, Deep())
    assert facts.missing["order"].startswith("the re-read order is over a limit (nested deeper than 64 levels")


def test_a_calls_fact_over_a_call_with_deep_arguments_is_missing_not_a_crash() -> None:
    checklist = parse_checklist(
        f'policy: {{name: p, version: "{policy_version("p")}"}}\n'
        "facts:\n  sent:\n    tool: send_certificate\n    collect: calls\n"
    )
    nested: Any = 1
    for _ in range(10_000):
        nested = {"a": nested}
    earlier = ToolCall(id="r1", name="send_certificate", arguments={"amount": nested})
    trajectory = Trajectory(messages=[Message(role="assistant", tool_calls=[earlier])])
    facts = resolve_facts(checklist, CERTIFICATE, trajectory, {"sent"})
    assert facts.missing["sent"].startswith("an earlier send_certificate call cannot be checked: its argument")


def test_a_pending_call_with_arguments_past_the_limits_is_blocked_before_cel(airline: Checklist) -> None:
    call = ToolCall(id="p1", name="send_certificate", arguments={"user_id": "mia_li_3668", "amount": 2**70})
    decision = check(airline, dialogue(("get_user_details", {"user_id": "mia_li_3668"}, json.dumps(USER))), call)
    assert decision.outcome == "block" and "integer outside the 64-bit range" in (decision.message or "")
