"""The first-hour traps: gate-only says what it did not check; a one-message dialogue takes format=."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from policyguard import Guard
from policyguard.errors import FormatError

ROOT = Path(__file__).parents[2]
DESK = ROOT / "examples" / "refund_desk"
DIALOGUE = json.loads((ROOT / "tests" / "scenarios" / "refund" / "dialogue.json").read_text())
CALL = {"id": "w1", "name": "issue_refund", "arguments": {"order_id": "O1", "amount": 80}}
FILES = {"policy": DESK / "policy.md", "checklist": DESK / "checklist.yaml"}


def test_gate_only_names_what_it_did_not_check_in_the_decision_and_once_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard.from_files(**FILES)
    with caplog.at_level(logging.WARNING, logger="policyguard"):
        first = guard.check(CALL, DIALOGUE)
        second = guard.check({**CALL, "id": "w2"}, DIALOGUE)
    assert first.allowed and first.unverified == ["confirmed"]
    assert any("not checked, no verifier" in w and "confirmed" in w for w in first.warnings)
    assert second.warnings == first.warnings
    assert [r.getMessage() for r in caplog.records].count(f"policyguard: {first.warnings[0]}") == 1


def test_on_unverified_block_blocks_what_only_a_verifier_could_judge() -> None:
    decision = Guard.from_files(**FILES, on_unverified="block").check(CALL, DIALOGUE)
    assert not decision.allowed and decision.unverified == ["confirmed"]


def test_on_unverified_is_allow_or_block() -> None:
    from policyguard.errors import ConfigError

    with pytest.raises(ConfigError, match="on_unverified must be 'allow' or 'block'"):
        Guard.from_files(**FILES, on_unverified="warn")  # type: ignore[arg-type]


def test_verify_names_the_unchecked_requirements_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from policyguard.cli import main

    (tmp_path / "call.json").write_text(json.dumps(CALL))
    argv = ["verify", "--policy", str(FILES["policy"]), "--checklist", str(FILES["checklist"])]
    argv += ["--trajectory", str(ROOT / "tests" / "scenarios" / "refund" / "dialogue.json")]
    argv += ["--call", str(tmp_path / "call.json")]
    assert main(argv) == 0
    assert "WARNING: not checked, no verifier (model none, on_unverified='allow'): confirmed" in capsys.readouterr().err
    assert main([*argv, "--on-unverified", "block"]) == 1


def test_a_one_message_dialogue_the_error_asks_format_for_accepts_format() -> None:
    guard = Guard.from_files(**FILES)
    one = [{"role": "user", "content": "Refund O1 please."}]
    with pytest.raises(FormatError, match="pass format="):
        guard.check(CALL, one)
    decision = guard.check(CALL, one, format="openai_chat")
    assert not decision.allowed  # nothing was read: the data checks cannot hold
