"""`policyguard test`: whole decisions against a team's expectations, and `policyguard init` to start them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from policyguard.cli import main

HERE = Path(__file__).parent / "refund"
DESK = Path(__file__).parents[2] / "examples" / "refund_desk"
FILES = ["--policy", str(DESK / "policy.md"), "--checklist", str(DESK / "checklist.yaml")]


def _test(path: Path, *extra: str) -> int:
    return main(["test", str(path), *FILES, *extra])


def test_every_scenario_as_expected_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert _test(HERE / "scenarios.yaml") == 0
    out, err = capsys.readouterr()
    assert out.count("ok ") == 3
    assert "3 of 3 scenario(s) as expected" in err


def test_recorded_verdicts_decide_the_model_part_and_without_them_the_gate_alone_does(tmp_path: Path) -> None:
    shutil.copytree(HERE, tmp_path / "refund")
    scenarios = tmp_path / "refund" / "scenarios.yaml"
    text = scenarios.read_text().replace("    verdicts: verdicts_yes.json\n", "")
    scenarios.write_text(text)
    assert _test(scenarios) == 0  # --model none: the confirmation is UNVERIFIED, allowed as verify allows it
    no = (
        (tmp_path / "refund" / "verdicts_yes.json")
        .read_text()
        .replace('"MET", "evidence": "the customer', '"NOT_MET", "evidence": "the customer')
    )
    (tmp_path / "refund" / "no.json").write_text(no.replace('"PASS"', '"BLOCK"'))
    assert _test(scenarios, "--model", f"scripted:{tmp_path / 'refund' / 'no.json'}") == 1


def test_a_scenario_that_decides_otherwise_exits_1_naming_it_the_outcomes_and_requirements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HERE, tmp_path / "refund")
    scenarios = tmp_path / "refund" / "scenarios.yaml"
    scenarios.write_text(
        scenarios.read_text().replace(
            "expect: block\n    not_met: [within-captured]", "expect: allow\n    not_met: [own-order]"
        )
    )
    assert _test(scenarios) == 1
    out, err = capsys.readouterr()
    assert f"FAIL a refund above what was captured is blocked ({scenarios}:5): block" in out
    assert "expected allow, got block (stage gate)" in out
    assert "expected own-order NOT MET, it was MET" in out
    assert "within-captured NOT_MET" in out
    assert "2 of 3 scenario(s) as expected" in err


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "scenarios:\n  - name: x\n    trajectory: []\n    call: {id: a, name: issue_refund}\n    expect: maybe\n",
            ":5: scenarios.0.expect",
        ),
        (
            "scenarios:\n  - name: x\n    trajectory: missing.json\n    call: {id: a, name: b}\n    expect: block\n",
            ":3: scenarios.0.trajectory",
        ),
        (
            "scenarios:\n  - name: x\n    trajectory: []\n    call: {id: a, name: b}\n    expect: block\n    extra: 1\n",
            ":6: scenarios.0.extra",
        ),
        ("scenarios: [\n", ":2"),
        ("scenarios:\n  - name: x\n    trajectory: []\n    call: [1]\n    expect: block\n", ":4: scenarios.0.call"),
    ],
)
def test_a_malformed_file_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert _test(path) == 2
    assert f"policyguard: error: {path}{where}" in capsys.readouterr().err


def test_init_writes_starter_scenarios_beside_the_checklist_that_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("checklist.yaml", "policy.md"):
        shutil.copy(DESK / name, tmp_path / name)
    assert main(["init", str(tmp_path / "checklist.yaml")]) == 0
    starter = tmp_path / "scenarios.yaml"
    assert "name: issue_refund" in starter.read_text()
    assert (
        main(
            [
                "test",
                str(starter),
                "--policy",
                str(tmp_path / "policy.md"),
                "--checklist",
                str(tmp_path / "checklist.yaml"),
            ]
        )
        == 0
    )
    assert main(["init", str(tmp_path / "checklist.yaml")]) == 2  # never overwrites without --force
    assert "already exists" in capsys.readouterr().err


def test_init_without_a_checklist_points_to_checklist_init(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == 2
    assert "policyguard checklist init --policy" in capsys.readouterr().err


def test_the_guides_scenarios_are_the_ones_this_suite_runs() -> None:
    import yaml

    from tests.docblocks import doc_block

    shown = yaml.safe_load(doc_block("docs/checklists/rollout.md", "scenarios"))
    ran = yaml.safe_load((HERE / "scenarios.yaml").read_text())
    assert shown["scenarios"] == ran["scenarios"][:2]
