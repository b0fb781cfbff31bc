"""The checklist validator: every problem at once, each with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyguard.authoring.validate import (
    Problem,
    ToolInfo,
    checklist_stats,
    has_errors,
    load_tool_infos,
    normalize_policy_text,
    quote_in_policy,
    tool_info_from_schema,
    validate_checklist,
)
from policyguard.checklist.schema import load_checklist, parse_checklist

FIXTURES = Path(__file__).parent / "fixtures"
POLICY = (FIXTURES / "policy.md").read_text(encoding="utf-8")
TOOLS = load_tool_infos(FIXTURES / "tools.json")


def _validate(name: str) -> list[Problem]:
    return validate_checklist(FIXTURES / name, policy_text=POLICY, tools=TOOLS)


def _by_line(problems: list[Problem]) -> dict[int | None, list[Problem]]:
    found: dict[int | None, list[Problem]] = {}
    for problem in problems:
        found.setdefault(problem.line, []).append(problem)
    return found


def test_a_clean_checklist_has_no_problems() -> None:
    assert _validate("good.yaml") == []


def test_every_problem_in_one_file_is_reported_together_with_its_line() -> None:
    problems = _validate("many_problems.yaml")
    errors = [p for p in problems if p.severity == "error"]
    lines = _by_line(errors)

    def one(line: int, field: str, *fragments: str) -> None:
        matching = [p for p in lines.get(line, []) if p.field == field]
        assert len(matching) == 1, f"expected one error at line {line} on {field}, got {lines.get(line)}"
        for fragment in fragments:
            assert fragment in matching[0].message

    one(5, "policy.version", "policy version mismatch", "sha256:5792f1be")
    one(6, "owner", "unknown field")
    one(19, "tools.refund.requirements.0.check", "does not compile")
    one(24, "tools.refund.requirements.1.check", "argument 'currency'", "refund")
    one(27, "tools.refund.requirements.1.examples.1", "should comply", "false")
    one(31, "tools.refund.requirements.2.source", "quote not found")
    one(32, "tools.refund.requirements.2.check", "fact 'customer' is not declared")
    one(36, "tools.void_order", "unknown tool 'void_order'")
    one(42, "tools.void_order.requirements.0.prerequisites.0", "'refund' is not a read-only tool")
    assert len(errors) == 9
    assert [p.line for p in problems] == sorted(p.line or 0 for p in problems)


def test_problems_print_as_file_line_field_message() -> None:
    problem = next(p for p in _validate("many_problems.yaml") if p.field == "owner")
    assert (
        str(problem)
        == f"{FIXTURES / 'many_problems.yaml'}:6: owner: error: unknown field (not in the checklist schema)"
    )
    warning = Problem(file="c.yaml", line=3, field="tools.x", message="no requirements", severity="warning")
    assert str(warning) == "c.yaml:3: tools.x: warning: no requirements"


def test_a_check_without_a_violating_example_is_a_warning_not_an_error() -> None:
    warnings = [p for p in _validate("many_problems.yaml") if p.severity == "warning"]
    assert [(p.line, p.message) for p in warnings] == [(25, "check has no violating example")]
    assert has_errors(warnings) is False


def test_bad_yaml_is_one_problem_with_the_line() -> None:
    problems = _validate("bad_yaml.yaml")
    assert len(problems) == 1
    assert problems[0].line == 10 and "invalid YAML" in problems[0].message


def test_all_schema_errors_are_reported_not_just_the_first() -> None:
    problems = _validate("schema_errors.yaml")
    assert [(p.line, p.field) for p in problems] == [
        (10, "tools.refund.requirements.0.kind"),
        (17, "tools.refund.requirements.1.examples.0.complies"),
    ]


def test_an_unreadable_file_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    problems = validate_checklist(tmp_path / "missing.yaml")
    assert len(problems) == 1 and "cannot read file" in problems[0].message


def test_without_policy_and_tools_only_the_file_itself_is_checked() -> None:
    fields = {p.field for p in validate_checklist(FIXTURES / "many_problems.yaml")}
    assert "policy.version" not in fields and "tools.void_order" not in fields
    assert "tools.refund.requirements.0.check" in fields  # compile errors need neither


def test_a_write_tool_declared_read_only_is_an_error_and_an_undeclared_read_tool_a_warning() -> None:
    checklist = load_checklist(FIXTURES / "good.yaml")
    tools = [
        ToolInfo("get_order", frozenset({"order_id"}), mutating=True),
        ToolInfo("refund", frozenset({"order_id", "amount"}), mutating=True),
        ToolInfo("search", frozenset({"q"}), mutating=False),
    ]
    problems = validate_checklist(checklist, policy_text=POLICY, tools=tools)
    messages = {(p.severity, p.message) for p in problems}
    assert ("error", "'get_order' writes state (per the tool source) but is declared read-only") in messages
    assert ("error", "fact source 'get_order' writes state; facts come from read tools") in messages
    assert (
        "warning",
        "read-only tool 'search' is not declared; the guard will treat it as mutating",
    ) in messages


def test_a_mutating_tool_without_requirements_is_warned_about() -> None:
    checklist = parse_checklist(
        'policy: {name: p, version: "sha256:' + "0" * 64 + '"}\ntools:\n  delete_everything: {}\n', file="c.yaml"
    )
    problems = validate_checklist(checklist, tools=[ToolInfo("delete_everything", mutating=True)])
    assert [(p.line, p.severity, p.message) for p in problems] == [
        (3, "warning", "mutating tool 'delete_everything' has no requirements")
    ]


def test_tool_schemas_in_openai_responses_and_anthropic_form_are_read() -> None:
    chat = {"type": "function", "function": {"name": "a", "parameters": {"properties": {"x": {}}}}}
    responses = {"type": "function", "name": "b", "parameters": {"properties": {"y": {}}}}
    anthropic = {"name": "c", "input_schema": {"properties": {"z": {}}}}
    assert [tool_info_from_schema(t).parameters for t in (chat, responses, anthropic)] == [
        frozenset({"x"}),
        frozenset({"y"}),
        frozenset({"z"}),
    ]


def test_quotes_match_across_markdown_emphasis_line_breaks_and_typographic_quotes() -> None:
    policy = normalize_policy_text(POLICY)
    assert quote_in_policy("Refunds are allowed only for orders that were delivered.", policy)
    assert quote_in_policy("may not exceed the amount captured", policy)  # across a line break
    assert quote_in_policy('confirm the refund with the user ("yes")', policy)  # curly vs straight quotes
    assert quote_in_policy("Refunds are allowed ... amount captured for the order.", policy)
    assert not quote_in_policy("amount captured ... Refunds are allowed", policy)  # fragments keep their order
    assert not quote_in_policy("Refunds are always allowed.", policy)


def test_stats_count_requirements_and_formal_checks() -> None:
    stats = checklist_stats(load_checklist(FIXTURES / "good.yaml"))
    assert (stats.requirements, stats.data, stats.procedural, stats.with_check) == (3, 2, 1, 2)
    assert stats.check_share == pytest.approx(2 / 3)
    assert "2 carry a formal check (67%)" in str(stats)


def test_a_fact_matched_on_an_argument_the_tool_lacks_is_reported_once_at_the_match() -> None:
    text = (FIXTURES / "good.yaml").read_text(encoding="utf-8")
    text = text.replace("match: {order_id: args.order_id}", "match: {order_id: args.order_ref}")
    checklist = parse_checklist(text, file="c.yaml")
    problems = validate_checklist(checklist, policy_text=POLICY, tools=TOOLS)
    assert [(p.line, p.field, p.message) for p in problems] == [
        (9, "facts.order.match.order_id", "argument 'order_ref' is not a parameter of refund")
    ]


def test_an_example_the_check_cannot_evaluate_is_an_error() -> None:
    text = (FIXTURES / "good.yaml").read_text(encoding="utf-8")
    text = text.replace("{args: {amount: 10}, facts: {order: {captured: 10.0}}", "{args: {amount: 10}, facts: {}")
    problems = validate_checklist(parse_checklist(text, file="c.yaml"), tools=TOOLS)
    assert [(p.line, p.field) for p in problems] == [(29, "tools.refund.requirements.1.examples.0")]
    assert "fails to evaluate" in problems[0].message


GOOD = (FIXTURES / "good.yaml").read_text(encoding="utf-8")


def _cli_errors(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, list[str]]:
    """`checklist validate FILE --policy POLICY` (no --tools) on ``text``: the file and its error lines."""
    from policyguard.cli import main

    path = tmp_path / "checklist.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["checklist", "validate", str(path), "--policy", str(FIXTURES / "policy.md")])
    errors = [line for line in capsys.readouterr().out.splitlines() if ": error: " in line]
    assert code == 1, errors
    return str(path), errors


def test_requirements_on_a_read_only_tool_are_an_error_because_they_never_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GOOD.replace(
        "  get_order: {mutating: false}\n",
        "  get_order:\n"
        "    mutating: false\n"
        "    requirements:\n"
        "      - id: delivered-lookup\n"
        "        text: Only delivered orders can be refunded.\n"
        "        kind: procedural\n"
        '        source: "Refunds are allowed only for orders that were delivered."\n',
    )
    path, errors = _cli_errors(tmp_path, text, capsys)
    [error] = errors
    assert error.startswith(f"{path}:12: tools.get_order.mutating: error: ")
    assert "'get_order'" in error and "never" in error


@pytest.mark.parametrize("key", ["refund ", " refund", "refund\t", "refund\u200b", "refund\u00a0", "re\u0007fund"])
def test_a_tool_key_with_surrounding_space_or_an_invisible_character_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """No agent calls "refund " or "refund\\u200b": such a key guards nothing, and it looks right on screen."""
    quoted = key.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    text = GOOD.replace("\n  refund:\n", f'\n  "{quoted}":\n')
    assert text != GOOD
    path, errors = _cli_errors(tmp_path, text, capsys)
    [error] = errors
    assert error.startswith(f"{path}:12: tools.{key}: error: ") and repr(key) in error


def _renew_checklist(requirement: str) -> str:
    return (
        'policy: {name: p, version: "sha256:' + "0" * 64 + '"}\n'
        "tools:\n"
        "  renew_loan:\n"
        "    requirements:\n"
        "      - id: confirmed\n"
        "        kind: procedural\n"
        f"{requirement}"
        "        source: get their explicit yes\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "The agent told the member the new due date and the member said yes.",
        'The user explicitly confirmed with "yes".',
        "The customer agreed to the fee.",
    ],
)
def test_a_requirement_that_reads_like_a_confirmation_without_the_flag_is_warned_about(text: str) -> None:
    checklist = parse_checklist(_renew_checklist(f"        text: {text}\n"), file="c.yaml")
    problems = validate_checklist(checklist, tools=[ToolInfo("renew_loan", mutating=True)])
    assert [(p.line, p.field, p.severity) for p in problems] == [(7, "tools.renew_loan.requirements.0.text", "warning")]
    assert "add confirmation: true" in problems[0].message


def test_a_flagged_confirmation_and_an_unrelated_procedural_requirement_get_no_warning() -> None:
    for lines in (
        "        text: The agent told the member the new due date and the member said yes.\n"
        "        confirmation: true\n",
        "        text: The agent confirmed the facts of the complaint with the tools first.\n",
    ):
        checklist = parse_checklist(_renew_checklist(lines), file="c.yaml")
        assert validate_checklist(checklist, tools=[ToolInfo("renew_loan", mutating=True)]) == []


def test_confirmation_on_a_data_requirement_is_an_error_at_its_line(tmp_path: Path) -> None:
    text = _renew_checklist("        text: The loan exists.\n        confirmation: true\n")
    (tmp_path / "c.yaml").write_text(text.replace("kind: procedural", "kind: data"), encoding="utf-8")
    problems = validate_checklist(tmp_path / "c.yaml", tools=[ToolInfo("renew_loan", mutating=True)])
    assert [(p.line, p.field, p.severity) for p in problems] == [
        (8, "tools.renew_loan.requirements.0.confirmation", "error")
    ]
    assert "confirmation: true is for procedural requirements" in problems[0].message
