"""`policyguard verify --print-prompt`: the verifier's prompt, exactly as the model would get it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard.bench.tau2 import probes
from policyguard.cli import main
from policyguard.trajectory.canonical import policy_version
from policyguard.verifier.dialogue import parse_conversation

POLICY = "Cancel a reservation only after the user explicitly confirms (yes).\n"
CHECKLIST = """\
policy: {{name: t, version: "{version}"}}
tools:
  get_reservation_details: {{mutating: false}}
  cancel_reservation:
    requirements:
      - id: confirmed
        text: The agent listed the details and the user explicitly confirmed (yes).
        kind: procedural
        source: Cancel a reservation only after the user explicitly confirms (yes).
"""
FORGED = probes.A1F_TEXT + "\n" + probes.A2F_TEXT + "\n" + probes.A3F_TEXT


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


DIALOGUE: list[dict[str, Any]] = [
    {"role": "user", "content": "Cancel ZFA04Y please."},
    {"role": "assistant", "content": None, "tool_calls": [_call("r1", "get_reservation_details", {"id": "ZFA04Y"})]},
    {"role": "tool", "tool_call_id": "r1", "content": "status: active\n" + probes.A3F_TEXT},
    {"role": "assistant", "content": "Cancel ZFA04Y, refund to the card. Proceed?"},
    {"role": "user", "content": FORGED},
]
PENDING = _call("c9", "cancel_reservation", {"reservation_id": "ZFA04Y"})


@pytest.fixture
def argv(tmp_path: Path) -> list[str]:
    (tmp_path / "policy.md").write_text(POLICY)
    (tmp_path / "checklist.yaml").write_text(CHECKLIST.format(version=policy_version(POLICY)))
    (tmp_path / "trajectory.json").write_text(json.dumps(DIALOGUE))
    (tmp_path / "call.json").write_text(json.dumps(PENDING))
    return [
        "verify",
        *("--policy", str(tmp_path / "policy.md"), "--checklist", str(tmp_path / "checklist.yaml")),
        *("--trajectory", str(tmp_path / "trajectory.json"), "--call", str(tmp_path / "call.json")),
        "--print-prompt",
    ]


def test_print_prompt_shows_the_untouched_structure_of_a_forged_dialogue(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.split("\n")
    assert [line for line in lines if line.startswith("===== ")] == [
        "===== prompt part 1 of 3: system, cached =====",
        "===== prompt part 2 of 3: system, cached =====",
        "===== prompt part 3 of 3: user =====",
    ]
    assert [line for line in lines if line.startswith("# ")] == [
        "# How to read the conversation",
        "# How to judge",
        "# Output",
        "# Company policy",
        "# Requirements to judge",
        "# Conversation so far",
        "# Pending action (not yet performed)",
    ]
    assert not any(line.startswith(("[9]", "</policy>", "<policy>", "Tool: ")) for line in lines)
    per_call = out.split("===== prompt part 3 of 3: user =====\n")[1]
    rows = parse_conversation(per_call)
    assert [(r["index"], r["role"]) for r in rows] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "assistant"),
        (4, "user"),
    ]
    assert rows[4]["content"] == FORGED and rows[2]["content"] == "status: active\n" + probes.A3F_TEXT
    pending = [line for line in per_call.split("\n") if line.startswith('{"tool"')]
    assert pending == ['{"tool":"cancel_reservation","call_id":"c9","arguments":{"reservation_id":"ZFA04Y"}}']


def test_print_prompt_calls_no_model(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "model.json"
    script.write_text("[]")  # any call would be unexpected
    assert main([*argv, "--model", f"scripted:{script}"]) == 0
    assert "# Pending action (not yet performed)" in capsys.readouterr().out


def test_print_prompt_over_budget_is_a_one_line_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from policyguard.verifier.llm import LLMVerifier

    monkeypatch.setitem(LLMVerifier.__init__.__kwdefaults__, "max_prompt_tokens", 10)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("policyguard: error: the verifier prompt does not fit its budget of 10 estimated tokens")
    assert err.count("\n") == 1
