"""An absent principal equals nothing: checks that need the authenticated user block without one."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from policyguard.checklist.schema import Checklist, load_checklist
from policyguard.gate.facts import resolve_principal
from policyguard.gate.hardgate import HardGate
from policyguard.resources import shipped_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import Message, ToolCall, Trajectory

NOW = datetime(2024, 5, 15, 20, 0, tzinfo=timezone.utc)
ADDRESS = {"address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}


@pytest.fixture(scope="module")
def retail() -> Checklist:
    return load_checklist(shipped_checklist("retail"))


def lookup(result: Any, *, user_id: str = "noah_brown_6181", is_error: bool = False) -> Trajectory:
    call = ToolCall(id="r1", name="get_user_details", arguments={"user_id": user_id})
    content = result if isinstance(result, str) else json.dumps(result)
    return Trajectory(
        messages=[
            Message(role="user", content="Please change my address."),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="r1", content=content, is_error=is_error),
        ]
    )


def modify_address(user_id: str | None) -> ToolCall:
    return ToolCall(id="p1", name="modify_user_address", arguments={"user_id": user_id, **ADDRESS})


@pytest.mark.parametrize(
    ("result", "is_error"),
    [
        ("Error: User not found", True),
        ({"name": {"first_name": "Noah"}}, False),
        ({"user_id": None}, False),
        ({"user_id": ""}, False),
        ("noah_brown_6181", False),
        ({"user_id": "james_li_5688"}, False),
    ],
)
def test_a_lookup_that_authenticates_nobody_lets_no_null_user_through(
    retail: Checklist, result: Any, is_error: bool
) -> None:
    """``modify_user_address(user_id=null)`` after a lookup that gave no principal: null == null must not pass."""
    trajectory = lookup(result, is_error=is_error)
    assert resolve_principal(retail, trajectory, None) is None
    context = CheckContext(checklist=retail, policy_text="", now=NOW)
    decision = HardGate(retail).check(modify_address(None), trajectory, context)
    assert decision.outcome == "block"
    statuses = {r.id: r.status for r in decision.requirements}
    assert statuses["address-own-account"] == "NOT_MET"


def test_without_a_principal_the_block_says_to_authenticate_first(retail: Checklist) -> None:
    trajectory = lookup({"name": {"first_name": "Noah"}})
    context = CheckContext(checklist=retail, policy_text="", now=NOW)
    decision = HardGate(retail).check(modify_address(None), trajectory, context)
    assert "authenticate the user first: call get_user_details(user_id=...)" in (decision.message or "")


@pytest.mark.parametrize(
    ("result", "is_error", "why"),
    [
        ("Error: User not found", True, "it failed"),
        ("noah_brown_6181", False, "its result is not JSON"),
        ({"name": {"first_name": "Noah"}}, False, "its result has no 'user_id'"),
        ({"user_id": "james_li_5688"}, False, "it returned another user's record"),
    ],
)
def test_the_block_says_why_the_lookup_that_was_made_authenticates_nobody(
    retail: Checklist, result: Any, is_error: bool, why: str
) -> None:
    """An agent told only "call get_user_details" would repeat a lookup that cannot work; say what was wrong."""
    context = CheckContext(checklist=retail, policy_text="", now=NOW)
    decision = HardGate(retail).check(modify_address(None), lookup(result, is_error=is_error), context)
    assert f"(the last get_user_details call did not authenticate anyone: {why})" in (decision.message or "")


def test_a_lookup_of_the_user_authenticates_them(retail: Checklist) -> None:
    trajectory = lookup({"user_id": "noah_brown_6181", "name": {"first_name": "Noah"}})
    assert resolve_principal(retail, trajectory, None) == "noah_brown_6181"
    context = CheckContext(checklist=retail, policy_text="", now=NOW)
    decision = HardGate(retail).check(modify_address("noah_brown_6181"), trajectory, context)
    statuses = {r.id: r.status for r in decision.requirements}
    assert statuses["address-own-account"] == "MET"
    # the retail policy also asks to locate the user id by email or name + zip, which this dialogue never did
    assert [rid for rid, status in statuses.items() if status == "NOT_MET"] == ["authenticated"]


def test_a_fact_matched_on_an_absent_principal_is_missing_with_the_reason() -> None:
    from policyguard.checklist.schema import parse_checklist
    from policyguard.gate.facts import resolve_facts
    from policyguard.trajectory.canonical import policy_version

    checklist = parse_checklist(
        f'policy: {{name: p, version: "{policy_version("p")}"}}\n'
        "principal: {tool: get_user_details, field: user_id}\n"
        "facts:\n  me:\n    tool: get_user_details\n    match: {user_id: principal}\n"
    )
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[ToolCall(id="r1", name="get_user_details", arguments={})]),
            Message(role="tool", tool_call_id="r1", content='{"user_id": null, "points": 900}'),
        ]
    )
    call = ToolCall(id="p", name="redeem", arguments={})
    facts = resolve_facts(checklist, call, trajectory, {"me"}, principal=None)
    assert facts.values == {}
    assert facts.missing["me"].startswith("authenticate the user first")
