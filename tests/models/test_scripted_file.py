"""The scripted-verifier file (`--model scripted:FILE.json`): its documented format, and errors naming file and step."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from policyguard import ConfigError, Message, ModelError, ScriptedModelError, ToolCall, Trajectory, parse_checklist
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.llm import LLMVerifier
from policyguard.verifier.models import scripted
from policyguard.verifier.models.base import ModelRequest, PromptPart
from policyguard.verifier.models.scripted import ScriptedModel
from policyguard.verifier.verdict import parse_verifier_output

REQUEST = ModelRequest(parts=[PromptPart(role="user", content="judge")])


def _write(tmp_path: Path, steps: object) -> Path:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(steps))
    return path


def _documented_example() -> list[object]:
    doc = scripted.__doc__ or ""
    block = re.search(r"retry gets a verdict::\n\n(.*?)\n\nA verdict", doc, re.S)
    assert block is not None, "the module docstring lost its example"
    return json.loads(block.group(1))


def test_the_documented_example_loads_and_plays_a_timeout_then_a_verdict(tmp_path: Path) -> None:
    model = ScriptedModel.from_file(_write(tmp_path, _documented_example()))
    with pytest.raises(ModelError) as caught:
        model.complete(REQUEST)
    assert caught.value.kind == "timeout"
    verdict = parse_verifier_output(model.complete(REQUEST).text)
    assert verdict.verdict == "PASS" and [r.id for r in verdict.requirements] == [
        "refund.within_captured",
        "refund.confirmed",
    ]
    model.assert_complete()


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (["ok", {"respons": {}}], "step 2: expected a string"),
        ([{"error": "teapot"}], "step 1: unknown error kind 'teapot'"),
        ({"steps": []}, "must hold a JSON list"),
    ],
)
def test_a_bad_file_names_the_file_and_the_step(tmp_path: Path, steps: object, expected: str) -> None:
    path = _write(tmp_path, steps)
    with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
        ScriptedModel.from_file(path)
    assert str(path) in str(caught.value)


def test_an_error_step_and_a_call_past_the_end_name_the_file_and_the_step(tmp_path: Path) -> None:
    path = _write(tmp_path, ["first", {"error": "server"}])
    model = ScriptedModel.from_file(path)
    model.complete(REQUEST)
    with pytest.raises(ModelError, match=re.escape(f"{path} step 2: scripted server error")):
        model.complete(REQUEST)
    with pytest.raises(ScriptedModelError, match=re.escape(f"{path}: unexpected call #3")):
        model.complete(REQUEST)


def test_an_answer_the_verifier_cannot_use_names_the_file_and_step_not_internal_classes(tmp_path: Path) -> None:
    """Once: `_Failure: the answer does not judge requirement(s)`, with no hint which file or step."""
    policy = "Cancel only after the user explicitly confirms.\n"
    checklist = parse_checklist(
        f'policy: {{name: t, version: "{policy_version(policy)}"}}\n'
        "tools:\n  cancel:\n    requirements:\n"
        "      - {id: C-1, text: The user confirmed., kind: procedural, source: Cancel only after the user explicitly confirms.}\n"
    )
    path = _write(tmp_path, [{"response": {"requirements": [], "verdict": "PASS", "remediation": ""}}])
    call = ToolCall(id="c1", name="cancel", arguments={})
    dialogue = Trajectory(
        messages=[Message(role="user", content="cancel, yes"), Message(role="assistant", tool_calls=[call])]
    )
    context = CheckContext(checklist=checklist, policy_text=policy, now=datetime(2024, 5, 15, tzinfo=timezone.utc))
    decision = LLMVerifier(ScriptedModel.from_file(path), retries=0).verify(call, dialogue, context)
    assert decision.stage == "verifier_error" and decision.error is not None
    assert "_Failure" not in decision.error
    assert "does not judge requirement(s): C-1" in decision.error and f"{path} step 1" in decision.error
