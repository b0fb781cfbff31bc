"""The README's OpenAI Agents SDK example runs as written, with a scripted agent model and verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.docblocks import doc_block

pytest.importorskip("agents")

from agents.models.multi_provider import MultiProvider  # noqa: E402

from policyguard import ScriptedModel  # noqa: E402
from policyguard.trajectory.canonical import policy_version  # noqa: E402

from .test_agents_sdk import ScriptedAgentModel, call, say  # noqa: E402

POLICY = "Refund at most the amount captured for the order.\nRefund only after the user says yes to the amount.\n"
CHECKLIST = f"""
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
facts:
  order: {{tool: get_order, match: {{order_id: args.order_id}}}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: within_captured
        text: The refund must not exceed the amount captured for the order.
        kind: data
        source: Refund at most the amount captured for the order.
        check: args.amount <= facts.order.captured
      - id: confirmed
        text: The user said yes to this refund amount.
        kind: procedural
        source: Refund only after the user says yes to the amount.
"""
REMEDIATION = "Tell the user the refund amount and ask them to confirm with yes before refunding."


def test_readme_agents_sdk_example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any) -> None:
    code = doc_block("docs/guarding/agents-sdk.md", "agents-sdk")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.md").write_text(POLICY)
    (tmp_path / "checklist.yaml").write_text(CHECKLIST)

    agent_model = ScriptedAgentModel(
        [call("c1", "get_order", {"order_id": "O1"})],
        [call("c2", "issue_refund", {"order_id": "O1", "amount": 50})],
        [say("Shall I refund 50 USD on O1?")],
    )
    names: list[str | None] = []

    def scripted_model(self: Any, model_name: str | None) -> ScriptedAgentModel:
        names.append(model_name)
        return agent_model

    monkeypatch.setattr(MultiProvider, "get_model", scripted_model)
    verdict = {
        "requirements": [
            {"id": "within_captured", "status": "MET", "evidence": "captured 80", "evidence_messages": [3]},
            {"id": "confirmed", "status": "NOT_MET", "evidence": "no yes in the dialogue", "evidence_messages": []},
        ],
        "verdict": "BLOCK",
        "remediation": REMEDIATION,
    }
    verifier = ScriptedModel([json.dumps(verdict)])
    monkeypatch.setattr("policyguard.verifier.models.resolve_model", lambda spec: verifier)

    exec(compile(code, "docs/guarding/agents-sdk.md", "exec"), {"__name__": "readme_agents_example"})

    assert capsys.readouterr().out.strip() == "Shall I refund 50 USD on O1?"
    assert set(names) == {"gpt-4.1"}
    verifier.assert_complete()
    assert agent_model.outputs(2)["c2"] == f"Error: {REMEDIATION}"  # the model read the remediation
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    decision = [r for r in records if r["event"] == "decision" and r["tool"] == "issue_refund"]
    assert decision and decision[0]["verdict"] == "BLOCK" and decision[0]["reached_executor"] is False
    assert decision[0]["session_id"] == "user-42"  # keyed by the SDK session's id
    assert not [r for r in records if r["event"] == "execute"]  # the refund never ran
