"""The README's drop-in example runs as written, against a scripted client and verifier."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from policyguard import ScriptedModel
from policyguard.trajectory.canonical import policy_version
from tests.docblocks import doc_block

openai = pytest.importorskip("openai")
from openai.types.chat import ChatCompletion  # noqa: E402

POLICY = "Refund only after the user says yes to the amount.\n"
CHECKLIST = f"""
policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
tools:
  get_order: {{mutating: false}}
  issue_refund:
    requirements:
      - id: confirmed
        text: The user said yes to this refund amount.
        kind: procedural
        source: Refund only after the user says yes to the amount.
"""
REMEDIATION = "Tell the user the refund amount and ask them to confirm with yes before refunding."


def _completion(message: dict[str, Any]) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}],
        }
    )


def _tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_readme_drop_in_example(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code = doc_block("README.md", "drop-in-loop")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.md").write_text(POLICY)
    (tmp_path / "checklist.yaml").write_text(CHECKLIST)

    refunds: list[tuple[str, float]] = []
    my_tools = types.ModuleType("my_tools")
    my_tools.TOOL_SCHEMAS = []  # type: ignore[attr-defined]
    my_tools.get_order = lambda order_id: {"order_id": order_id, "captured": 80}  # type: ignore[attr-defined]
    my_tools.issue_refund = lambda order_id, amount: refunds.append((order_id, amount)) or "issued"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "my_tools", my_tools)

    replies = [
        _completion({"content": None, "tool_calls": [_tool_call("c1", "get_order", {"order_id": "O1"})]}),
        _completion(
            {"content": None, "tool_calls": [_tool_call("c2", "issue_refund", {"order_id": "O1", "amount": 80})]}
        ),
        _completion({"content": "Shall I refund 80 USD on O1?"}),
    ]
    seen: list[list[dict[str, Any]]] = []

    class FakeClient:
        def __init__(self) -> None:
            self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._create))

        def _create(self, *, model: str, messages: list[dict[str, Any]], tools: list[Any]) -> ChatCompletion:
            seen.append(list(messages))
            return replies.pop(0)

    monkeypatch.setattr(openai, "OpenAI", FakeClient)
    verdict = {
        "requirements": [{"id": "confirmed", "status": "NOT_MET", "evidence": "no yes in the dialogue"}],
        "verdict": "BLOCK",
        "remediation": REMEDIATION,
    }
    model = ScriptedModel([json.dumps(verdict)])
    monkeypatch.setattr("policyguard.verifier.models.resolve_model", lambda spec: model)

    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})

    assert refunds == []  # the blocked refund never ran
    tool_messages = [m for m in seen[-1] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["c1", "c2"]
    assert json.loads(tool_messages[0]["content"]) == {"order_id": "O1", "captured": 80}
    assert tool_messages[1]["content"] == f"Error: {REMEDIATION}"  # marked failed, so it reads back as no fact
    model.assert_complete()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    decision = [r for r in records if r["event"] == "decision" and r["tool"] == "issue_refund"]
    assert decision and decision[0]["verdict"] == "BLOCK" and decision[0]["reached_executor"] is False
