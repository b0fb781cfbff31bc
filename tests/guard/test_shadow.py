"""Shadow mode: a rule on live traffic records what it would block and lets the call run; fail-closed holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policyguard import Guard, parse_checklist
from policyguard.checklist.schema import Checklist
from policyguard.errors import ConfigError
from policyguard.gate.hardgate import HardGate
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.messages import ToolCall, Trajectory
from policyguard.verifier.llm import LLMVerifier
from policyguard.verifier.models.scripted import ScriptedModel

ROOT = Path(__file__).parents[2]
DESK = ROOT / "examples" / "refund_desk"
POLICY = (DESK / "policy.md").read_text()
DIALOGUE = json.loads((ROOT / "tests" / "scenarios" / "refund" / "dialogue.json").read_text())
O2_READ = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "r3", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O2"}'}}]},
    {"role": "tool", "tool_call_id": "r3", "content": '{"order_id": "O2", "customer_id": "C2", "captured": 45.0}'},
]  # fmt: skip
WITH_O2 = DIALOGUE[:5] + O2_READ + DIALOGUE[5:]


def _checklist(edit: tuple[str, str] | None = None) -> Checklist:
    text = (DESK / "checklist.yaml").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    return parse_checklist(text, file="desk.yaml")


SHADOW_CAPTURED = ("      - id: within-captured\n", "      - id: within-captured\n        mode: shadow\n")


def _guard(checklist: Checklist, **settings: Any) -> Guard:
    settings.setdefault("allow_unverified", True)
    return Guard(checklist, POLICY, gate=HardGate(checklist), **settings)


def _refund(amount: float, order: str = "O1", **more: Any) -> ToolCall:
    return ToolCall(id="w1", name="issue_refund", arguments={"order_id": order, "amount": amount, **more})


def _dialogue(messages: list[dict[str, Any]] = DIALOGUE) -> Trajectory:
    return to_trajectory(messages)


def test_a_shadowed_requirement_that_fails_lets_the_call_run_and_says_it_would_have_blocked() -> None:
    guard = _guard(_checklist(SHADOW_CAPTURED))
    decision = guard.check(_refund(120), _dialogue())
    assert decision.allowed and decision.verdict == "PASS"
    assert decision.shadow_blocked == ["within-captured"]
    assert decision.message is None
    assert any("within-captured would have blocked this call" in w for w in decision.warnings)
    assert guard.counters.shadow_blocked == 1 and guard.counters.passed == 1 and guard.counters.blocked == 0
    event = [e for e in guard.trace.events if e["event"] == "decision"][-1]
    assert event["shadow_blocked"] == ["within-captured"] and event["outcome"] == "allow"


def test_a_call_that_passes_has_nothing_shadow_blocked() -> None:
    decision = _guard(_checklist(SHADOW_CAPTURED)).check(_refund(80), _dialogue())
    assert decision.allowed and decision.shadow_blocked == []


def test_an_enforced_requirement_still_blocks_beside_a_shadowed_one() -> None:
    decision = _guard(_checklist(SHADOW_CAPTURED)).check(_refund(120, "O2"), _dialogue(WITH_O2))
    assert not decision.allowed
    assert decision.shadow_blocked == []
    assert {r.id for r in decision.requirements if r.status == "NOT_MET"} >= {"own-order"}


def test_guard_mode_shadow_shadows_every_requirement() -> None:
    decision = _guard(_checklist(), mode="shadow").check(_refund(120, "O2"), _dialogue(WITH_O2))
    assert decision.allowed
    assert sorted(decision.shadow_blocked) == ["own-order", "within-captured"]


def test_missing_evidence_blocks_even_in_shadow_mode() -> None:
    no_order_read = DIALOGUE[:3] + DIALOGUE[5:]
    decision = _guard(_checklist(), mode="shadow").check(_refund(80), _dialogue(no_order_read))
    assert not decision.allowed and decision.shadow_blocked == []


def test_the_money_rules_of_an_effect_hold_in_shadow_mode() -> None:
    effect = (
        "        source: Before refunding, tell the customer the amount and refund only after they say yes to it.\n",
        "        source: Before refunding, tell the customer the amount and refund only after they say yes to it.\n"
        "    effect: {transaction_arg: order_id, ceiling: 50}\n",
    )
    guard = _guard(_checklist(effect), mode="shadow")
    decision = guard.check(_refund(80, idempotency_key="k1"), _dialogue())
    assert not decision.allowed, decision
    assert decision.shadow_blocked == []


def test_without_unverified_allowed_an_unjudged_enforced_requirement_keeps_the_block() -> None:
    guard = _guard(_checklist(SHADOW_CAPTURED), allow_unverified=False)
    assert not guard.check(_refund(120), _dialogue()).allowed


def _verdict(confirmed: str) -> str:
    return json.dumps(
        {
            "requirements": [
                {"id": "own-order", "status": "MET", "evidence": "C1 owns O1", "evidence_messages": [2, 4]},
                {"id": "within-captured", "status": "NOT_MET", "evidence": "120 > 80", "evidence_messages": [4]},
                {"id": "confirmed", "status": confirmed, "evidence": "the customer said yes", "evidence_messages": [6]},
            ],
            "verdict": "BLOCK",
            "remediation": "no",
        }
    )


@pytest.mark.parametrize(("confirmed", "allowed"), [("MET", True), ("NOT_MET", False)])
def test_a_gate_block_on_shadowed_rules_still_asks_the_verifier_about_the_enforced_ones(
    confirmed: str, allowed: bool
) -> None:
    model = ScriptedModel([_verdict(confirmed)])
    guard = _guard(_checklist(SHADOW_CAPTURED), verifier=LLMVerifier(model), allow_unverified=False)
    decision = guard.check(_refund(120), _dialogue())
    assert len(model.calls) == 1
    assert decision.allowed is allowed
    assert decision.shadow_blocked == (["within-captured"] if allowed else [])


def test_guard_mode_is_enforce_or_shadow_and_a_verifier_mode_there_is_named() -> None:
    with pytest.raises(ConfigError, match="'raw' is a verifier mode"):
        _guard(_checklist(), mode="raw")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'enforce' or 'shadow'"):
        _guard(_checklist(), mode="log")  # type: ignore[arg-type]


def test_from_files_takes_the_guard_mode_and_still_reads_a_verifier_mode_given_as_mode() -> None:
    files = {"policy": DESK / "policy.md", "checklist": DESK / "checklist.yaml"}
    assert Guard.from_files(**files, mode="shadow").mode == "shadow"
    older = Guard.from_files(**files, mode="raw", model=f"scripted:{DESK / 'verdicts' / 'openai_loop.json'}")
    assert older.mode == "enforce"
    assert older.verifier.mode == "raw"  # type: ignore[union-attr]


def test_the_checklist_version_changes_only_when_a_requirement_is_shadowed() -> None:
    plain = _checklist()
    explicit = _checklist(("      - id: within-captured\n", "      - id: within-captured\n        mode: enforce\n"))
    assert plain.version == explicit.version
    assert _checklist(SHADOW_CAPTURED).version != plain.version


def test_a_checklist_shadowed_whole_decides_like_guard_mode_shadow_and_says_so_in_its_version() -> None:
    from policyguard.guard.shadow import shadowed_checklist

    plain = _checklist()
    shadowed = shadowed_checklist(plain)
    assert shadowed.version != plain.version and shadowed.source is plain.source
    assert plain.tools["issue_refund"].requirements[0].mode == "enforce"  # the original is untouched
    decision = _guard(shadowed).check(_refund(120, "O2"), _dialogue(WITH_O2))
    assert decision.allowed and sorted(decision.shadow_blocked) == ["own-order", "within-captured"]


def test_verify_shadow_prints_the_would_block_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from policyguard.cli import main

    (tmp_path / "call.json").write_text(json.dumps(_refund(120).model_dump()))
    argv = ["verify", "--policy", str(DESK / "policy.md"), "--checklist", str(DESK / "checklist.yaml")]
    argv += ["--trajectory", str(ROOT / "tests" / "scenarios" / "refund" / "dialogue.json")]
    argv += ["--call", str(tmp_path / "call.json")]
    assert main(argv) == 1
    capsys.readouterr()
    assert main([*argv, "--shadow"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["shadow_blocked"] == ["within-captured"]
    assert "WARNING: shadow mode: within-captured would have blocked this call" in err


def test_audit_report_counts_would_blocks_per_requirement_with_first_last_and_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from policyguard.audit.trace import Trace
    from policyguard.cli import main

    trace = tmp_path / "trace.jsonl"
    guard = _guard(_checklist(SHADOW_CAPTURED), trace=Trace(trace))
    for amount in (120, 80, 130):
        guard.check(_refund(amount).model_copy(update={"id": f"w{amount}"}), _dialogue())
    guard.trace.close()
    assert main(["audit", "report", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "3 decisions, 2 allowed in shadow mode that a rule would block" in out
    assert "within-captured: would block 2 of 3 judged, first 20" in out
    assert "e.g. issue_refund w120" in out and "e.g. issue_refund w130" in out
    assert main(["audit", "report", str(trace), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["requirements"][0]
    assert record["id"] == "within-captured" and record["would_block"] == 2
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["audit", "report", str(tmp_path / "bad.jsonl")]) == 2
    assert f"{tmp_path / 'bad.jsonl'}:1: not JSON" in capsys.readouterr().err


def test_the_validator_warns_when_a_money_invariant_is_shadowed(tmp_path: Path) -> None:
    from policyguard.authoring.validate import has_errors, validate_checklist

    text = (DESK / "checklist.yaml").read_text().replace(*SHADOW_CAPTURED)
    path = tmp_path / "desk.yaml"
    path.write_text(text)
    assert not [p for p in validate_checklist(path, policy_text=POLICY) if "money invariant" in p.message]
    path.write_text(text + "    effect: {transaction_arg: order_id, ceiling: 500}\n")
    problems = validate_checklist(path, policy_text=POLICY)
    money = [p for p in problems if "money invariant" in p.message]
    assert len(money) == 1 and money[0].severity == "warning" and not has_errors(problems)
    assert money[0].field == "tools.issue_refund.requirements.1.mode" and "'within-captured'" in money[0].message


def test_checklist_show_prints_each_tools_effect_and_its_shadowed_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from policyguard.cli import main

    path = tmp_path / "desk.yaml"
    text = (DESK / "checklist.yaml").read_text().replace(*SHADOW_CAPTURED)
    path.write_text(text + "    effect: {transaction_arg: order_id, ceiling: 500, approval_threshold: 100}\n")
    assert main(["checklist", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "effect: money: moves args.amount on args.order_id, at most once per args.idempotency_key" in out
    assert "ceiling: 500 a call" in out and "approval: above 100 needs a person's approval" in out
    assert "[within-captured] data (shadow: records, never blocks)" in out
