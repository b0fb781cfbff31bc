"""Where guard meets host: GuardedTools checks the checklist's tool names and runs a declared effect once per key."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from policyguard import Guard, parse_checklist
from policyguard.errors import ConfigError
from policyguard.gate.hardgate import HardGate
from policyguard.integrations.openai_loop import GuardedTools
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.messages import ToolCall

ROOT = Path(__file__).parents[2]
DESK = ROOT / "examples" / "refund_desk"
POLICY = (DESK / "policy.md").read_text()
DIALOGUE = json.loads((ROOT / "tests" / "scenarios" / "refund" / "dialogue.json").read_text())
EFFECT = "    effect: {transaction_arg: order_id, ceiling: 500}\n"


def _guard(text: str) -> Guard:
    checklist = parse_checklist(text, file="desk.yaml")
    return Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)


def _tools(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def issue_refund(**arguments: Any) -> dict[str, Any]:
        runs.append(arguments)
        return {"status": "refunded", "n": len(runs)}

    return {"find_customer": lambda **a: {}, "get_order": lambda **a: {}, "issue_refund": issue_refund}


def test_an_approved_credit_runs_once_per_idempotency_key_without_an_executor() -> None:
    runs: list[dict[str, Any]] = []
    loop = GuardedTools(_guard((DESK / "checklist.yaml").read_text() + EFFECT), _tools(runs))
    args = {"order_id": "O1", "amount": 80, "idempotency_key": "k1"}
    first = loop.run(ToolCall(id="w1", name="issue_refund", arguments=args), to_trajectory(DIALOGUE))
    again = loop.run(ToolCall(id="w2", name="issue_refund", arguments=args), to_trajectory(DIALOGUE))
    assert first.executed and not first.is_error
    assert not again.executed and again.content == first.content  # the recorded result, no second effect
    other = loop.run(ToolCall(id="w3", name="issue_refund", arguments={**args, "amount": 10}), to_trajectory(DIALOGUE))
    assert other.is_error and not other.executed and "already used by another call" in other.content
    assert len(runs) == 1


def test_a_checklist_tool_the_host_lacks_is_a_config_error_naming_both_spellings() -> None:
    text = (DESK / "checklist.yaml").read_text().replace("  issue_refund:\n", "  issue_refnud:\n")
    with pytest.raises(
        ConfigError, match="'issue_refnud' \\(did you mean 'issue_refund', which GuardedTools has\\?\\)"
    ):
        GuardedTools(_guard(text), _tools([]))


def test_a_host_tool_no_checklist_entry_covers_is_listed_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    tools = {**_tools([]), "delete_account": lambda **a: {}}
    with caplog.at_level(logging.WARNING, logger="policyguard"):
        GuardedTools(_guard((DESK / "checklist.yaml").read_text()), tools)
    assert "no checklist entry covers, judged as unknown tools: delete_account" in caplog.text
