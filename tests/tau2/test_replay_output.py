"""`bench replay` tells a newcomer what its table means and whether the result is the expected one."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("tau2")

from policyguard.bench.tau2.replay import ClassTally, EvaluatorCheck, GoldCall, Miss, ReplayReport  # noqa: E402
from policyguard.bench.tau2.replay_view import render, verdict  # noqa: E402
from policyguard.cli import main  # noqa: E402
from tests.docblocks import doc_block, expected_lines  # noqa: E402


def _gold(task_id: str, passed: bool = False) -> GoldCall:
    return GoldCall(
        task_id=task_id, tool="cancel_reservation", arguments={}, outcome="deny", stage="gate", passed=passed
    )


def _report(**changes: Any) -> ReplayReport:
    base: dict[str, Any] = {
        "domain": "airline",
        "config": "gate_only",
        "probe": None,
        "checklist": "airline.yaml",
        "tasks": 50,
        "gold_total": 49,
        "gold_passed": 47,
        "gold_false_blocks": 2,
        "gold_blocked_calls": [_gold("29"), _gold("33")],
        "contradicting_gold": [_gold("9")],
        "contradicting_reasons": {"9": "gold cancels a flown reservation (tau2-bench issues #156, #224)"},
        "inserted_reads": {},
        "unverified_requirements": {},
        "violations_total": 2,
        "violations_blocked": 2,
        "by_class": {"cancel_flown": ClassTally(total=2, blocked=2)},
        "misses": [],
        "not_expressible": {},
        "evaluator_checks": [],
        "runtime_s": 1.0,
    }
    base.update(changes)
    return ReplayReport(**base)


def test_listed_gold_disagreements_are_expected_blocks() -> None:
    result = verdict(_report())
    assert result.as_expected
    assert result.listed_gold_blocks == ["29", "33"] and result.unexpected_gold_blocks == []
    assert result.summary.startswith("as expected") and "tasks 29, 33" in result.summary


def test_a_gold_block_that_is_not_listed_is_not_expected() -> None:
    result = verdict(_report(gold_blocked_calls=[_gold("29"), _gold("4")], gold_false_blocks=2))
    assert not result.as_expected
    assert result.unexpected_gold_blocks == ["4"]
    assert "1 unexpected gold block(s) (tasks 4)" in result.summary


def test_a_miss_a_probe_miss_or_a_bad_reward_is_not_expected() -> None:
    miss = Miss(case_id="c1", cls="cancel_flown", tool="cancel_reservation", arguments={}, outcome="allow", stage="-")
    assert verdict(_report(violations_blocked=1, misses=[miss])).summary == "NOT as expected - 1 miss(es)"
    probed = _report(probe_results={"A1": {"cancel_flown": ClassTally(total=2, blocked=1)}})
    assert verdict(probed).probe_misses == 1 and not verdict(probed).as_expected
    bad = EvaluatorCheck(
        task_id="0", violation="v", blocked_by_guard=True, reward_gold_plus_blocked=0.0, reward_gold_plus_executed=0.0
    )
    assert verdict(_report(evaluator_checks=[bad])).evaluator_mismatches == 1


def test_contradicting_gold_never_changes_the_verdict() -> None:
    assert verdict(_report(contradicting_gold=[_gold("9"), _gold("7", passed=True)])).as_expected


def test_table_has_a_legend_a_readme_pointer_a_verdict_and_no_issue_numbers() -> None:
    text = render(_report())
    assert "How to read this (details: benchmarks/tau2/README.md)" in text
    for term in ("gold write", "FALSE BLOCK", "contradicting", "injected", "probe", "added reads"):
        assert f"  {term} " in text, term
    assert "#156" not in text and "#224" not in text and "issue" not in text
    assert text.splitlines()[-1].startswith("verdict: as expected")


@pytest.mark.slow
def test_cli_as_expected_exits_zero_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "replay", "--per-class", "1", "--evaluate", "none"])
    out = capsys.readouterr().out
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("verdict: as expected") and "(tasks 29, 33)" in last
    assert "#156" not in out and "probe none (no attack added)" in out


@pytest.mark.slow
def test_cli_not_as_expected_exits_one_and_json_carries_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """args_only cannot see facts from reads, so most violations pass: the verdict says so and exit is 1."""
    code = main(["bench", "replay", "--config", "args_only", "--per-class", "1", "--evaluate", "none", "--json"])
    payload: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == 1
    assert payload["verdict"]["as_expected"] is False and payload["verdict"]["misses"] > 0
    assert payload["verdict"]["summary"].startswith("NOT as expected")


@pytest.mark.slow
def test_the_benchmarks_page_replays_run_as_written_and_end_as_expected(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/benchmarks.md's two full replays (airline, retail): exit 0 and the verdict says so."""
    steps = expected_lines(doc_block("docs/benchmarks.md", "replay"))
    assert [command for command, _ in steps] == [
        "policyguard bench replay --domain airline",
        "policyguard bench replay --domain retail",
    ]
    for command, _ in steps:
        assert main(command.split()[1:]) == 0, command
        assert "verdict: as expected" in capsys.readouterr().out
