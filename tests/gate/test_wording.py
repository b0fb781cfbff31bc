"""The gate's block messages read as sentences whether a requirement states a rule or a fact.

"This action is not allowed: The order belongs to the customer" reads as if the
fact were forbidden; the message quotes what the requirement says instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policyguard.checklist import load_checklist
from policyguard.checklist.schema import Checklist, Requirement
from policyguard.gate.hardgate import HardGate
from policyguard.gate.wording import not_met_message, read_first_message
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import ToolCall

SHIPPED = Path(__file__).parents[2] / "checklists"
QUOTED = re.compile(r'which says "([^"]*)" ')


def _requirements() -> list[tuple[str, str, Requirement]]:
    found: list[tuple[str, str, Requirement]] = []
    for path in sorted(SHIPPED.glob("*.yaml")):
        checklist = load_checklist(path)
        for tool, spec in checklist.tools.items():
            found += [(path.name, tool, req) for req in spec.requirements]
        found += [(path.name, "*", req) for req in checklist.general_rules]
    return found


REQUIREMENTS = _requirements()


def test_the_shipped_checklists_are_the_ones_measured() -> None:
    assert {name for name, _, _ in REQUIREMENTS} == {"airline.yaml", "retail.yaml", "telecom.yaml"}
    assert len(REQUIREMENTS) > 80


@pytest.mark.parametrize(("file", "tool", "req"), REQUIREMENTS, ids=lambda v: getattr(v, "id", None))
def test_every_shipped_requirement_blocks_with_well_formed_sentences(file: str, tool: str, req: Requirement) -> None:
    message = not_met_message(req.id, req.text)
    assert message.startswith("This action is blocked: it does not meet requirement ")
    assert message.endswith(".") and message[0].isupper()
    assert f"requirement {req.id}," in message
    assert not re.search(r"not allowed: [A-Z]", message)
    quoted = QUOTED.search(message)
    assert quoted is not None, message
    said = quoted.group(1)
    assert said[0].isupper() and said.endswith((".", "?", "!")), said  # the requirement, as a sentence
    assert said.rstrip(".") == " ".join(req.text.split()).replace('"', "'").rstrip(".")  # its text, unchanged
    after = message[quoted.end() :]
    assert after == "Explain this to the user and do not retry the same call."


@pytest.mark.parametrize(
    "text",
    ["The order belongs to the customer", "A reservation can be cancelled only if it was booked today."],
)
def test_a_fact_and_a_rule_both_read_as_what_the_requirement_says(text: str) -> None:
    message = not_met_message("own-order", text)
    assert f'which says "{text.rstrip(".")}." Explain this' in message


def test_a_requirement_over_several_lines_and_with_quotes_stays_one_quoted_sentence() -> None:
    message = not_met_message("confirmed-yes", 'The user said\n  "yes" to exactly this')
    assert "which says \"The user said 'yes' to exactly this.\" Explain" in message


@pytest.mark.parametrize(
    ("file", "tool", "req"), [r for r in REQUIREMENTS if r[2].read_first], ids=lambda v: getattr(v, "id", None)
)
def test_a_read_first_message_names_the_read_the_tool_and_the_requirement(
    file: str, tool: str, req: Requirement
) -> None:
    assert req.read_first is not None
    message = read_first_message(req.id, req.read_first, tool)
    assert message.startswith(f"Read first: call {req.read_first.split()[0]}")
    assert message.endswith(f" before {tool} (requirement {req.id}).")


def test_the_gate_blocks_with_that_message(
    checklist: Checklist,
    dialogue: Callable[[], Any],
    context: Callable[..., CheckContext],
    make_order: Callable[..., dict[str, Any]],
) -> None:
    trajectory = dialogue().read("get_order", {"order_id": "O1"}, make_order(captured=120.0)).build()
    call = ToolCall(id="c9", name="issue_refund", arguments={"order_id": "O1", "amount": 121})
    decision = HardGate(checklist).check(call, trajectory, context("alice"))
    [req] = [r for r in checklist.tools["issue_refund"].requirements if r.id == "refund.within_captured"]
    assert decision.message == not_met_message(req.id, req.text)
