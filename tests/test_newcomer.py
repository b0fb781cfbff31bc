"""A newcomer's path on a domain not shipped in checklists/ (a lending library), as docs/checklists/writing.md tells it.

``checklist init`` -> the skeleton fails ``validate`` -> the guide's finished
checklist validates clean -> a guarded loop allows a complying renewal and
blocks a rule-breaking one and a near-miss tool name. Every policy, tool list,
checklist and loop used here is extracted from the guide, so the guide stays true.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import Guard, GuardedTools, LLMVerifier, Message, ScriptedModel, ToolCall, Trajectory
from policyguard.authoring.checkinit import TODO_SOURCE, InitError, skeleton, write_skeleton
from policyguard.authoring.tools import ToolsError
from policyguard.authoring.validate import validate_checklist
from policyguard.checklist.schema import load_checklist, parse_checklist
from policyguard.cli import main
from policyguard.errors import ChecklistError
from policyguard.trajectory.canonical import policy_version
from tests.docblocks import expected_lines, shows

GUIDE = Path(__file__).resolve().parents[1] / "docs/checklists/writing.md"
HERE = Path(__file__).resolve().parent / "newcomer"
POLICY = HERE / "library_policy.md"
TOOLS = HERE / "library_tools.json"


def _block(marker: str) -> str:
    """The fenced block right after ``<!-- test: marker -->`` in the guide."""
    found = re.search(rf"<!-- test: {marker} -->\n```[a-z]*\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    assert found is not None, f"the guide lost its {marker!r} block"
    return found.group(1)


@pytest.fixture
def domain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the guide's policy and tools, as a newcomer would save them."""
    (tmp_path / "library_policy.md").write_text(_block("policy"), encoding="utf-8")
    (tmp_path / "library_tools.json").write_text(_block("tools"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _cli(*argv: str) -> int:
    return main(list(argv))


def _run_guide_commands(marker: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Run a shell block of the guide as written; each ``# ...`` line under a command is in its output."""
    for command, expected in expected_lines(_block(marker)):
        argv = shlex.split(command)
        assert argv[0] == "policyguard", command
        main(argv[1:])
        out = capsys.readouterr()
        for line in expected:
            assert shows(out.out + out.err, line), f"{command!r} did not print {line!r}:\n{out.out}{out.err}"


def test_the_guides_commands_run_as_written(domain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """init writes the skeleton, validate names the TODO, and the finished checklist validates clean."""
    _run_guide_commands("init-command", capsys)
    text = (domain / "library.yaml").read_text(encoding="utf-8")
    assert "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#")) == _block("skeleton")
    _run_guide_commands("validate-todo-command", capsys)
    (domain / "library.yaml").write_text(_block("checklist"), encoding="utf-8")
    _run_guide_commands("validate-command", capsys)


def test_guide_policy_and_tools_are_the_fixtures() -> None:
    """The files beside this test are the ones the guide shows (one source of truth)."""
    assert _block("policy") == POLICY.read_text(encoding="utf-8")
    assert json.loads(_block("tools")) == json.loads(TOOLS.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- init -> validate fails


def test_init_writes_the_skeleton_the_guide_shows(domain: Path) -> None:
    """Every tool listed, read-only only where declared, the policy pinned by sha256 and path."""
    code = _cli("checklist", "init", "--policy", "library_policy.md", "--tools", "library_tools.json", "-o", "c.yaml")
    assert code == 0
    text = (domain / "c.yaml").read_text(encoding="utf-8")
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    assert body == _block("skeleton")
    checklist = load_checklist(domain / "c.yaml")
    assert checklist.policy.version == policy_version(_block("policy"))
    assert checklist.policy.path == "library_policy.md"
    assert {name: spec.mutating for name, spec in checklist.tools.items()} == {
        "get_member": False,
        "get_loan": False,
        "renew_loan": True,
    }
    assert [req.source for req in checklist.tools["renew_loan"].requirements] == [
        TODO_SOURCE,
        _block("policy").splitlines()[-1],
    ]


def test_skeleton_fails_validate_with_file_and_line_until_the_todo_is_written(
    domain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The TODO requirement is not a quote of the policy: validate exits 1 and points at its line."""
    assert (
        _cli("checklist", "init", "--policy", "library_policy.md", "--tools", "library_tools.json", "-o", "c.yaml") == 0
    )
    capsys.readouterr()
    code = _cli("checklist", "validate", "c.yaml", "--policy", "library_policy.md", "--tools", "library_tools.json")
    out = capsys.readouterr().out
    assert code == 1
    line = next(n for n, text in enumerate((domain / "c.yaml").read_text().splitlines(), 1) if "source:" in text)
    assert f"c.yaml:{line}: tools.renew_loan.requirements.0.source: error: quote not found in the policy text" in out


def test_init_gives_every_mutating_tool_a_todo_that_fails_validate(tmp_path: Path) -> None:
    """One error per undeclared or writing tool; declared read-only tools get no requirement."""
    tools = [
        {"name": "lookup", "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "write_a", "input_schema": {"type": "object"}},
        {"name": "write_b", "input_schema": {"type": "object"}, "x-mutating": True},
    ]
    (tmp_path / "p.md").write_text("Only write what the user asked for.\n")
    (tmp_path / "t.json").write_text(json.dumps(tools))
    write_skeleton(tmp_path / "p.md", str(tmp_path / "t.json"), tmp_path / "c.yaml")
    problems = validate_checklist(tmp_path / "c.yaml", policy_text="Only write what the user asked for.\n", tools=tools)
    errors = [p for p in problems if p.severity == "error"]
    assert sorted(str(p.field) for p in errors) == [
        "tools.write_a.requirements.0.source",
        "tools.write_b.requirements.0.source",
    ]
    assert all(p.file == str(tmp_path / "c.yaml") and p.line for p in errors)


# ---------------------------------------------------------------- init's refusals


def test_init_puts_the_confirmation_rule_on_the_tool_its_sentence_is_about(tmp_path: Path) -> None:
    """ "Before renewing, ... get their explicit yes" is renew_loan's rule, not one for every write tool."""
    write_skeleton(POLICY, str(TOOLS), tmp_path / "c.yaml")
    checklist = load_checklist(tmp_path / "c.yaml")
    assert checklist.general_rules == []
    [confirmed] = [r for r in checklist.tools["renew_loan"].requirements if r.confirmation]
    assert (confirmed.id, confirmed.kind) == ("renew_loan-confirmed", "procedural")
    assert confirmed.source == "Before renewing, tell the member the new due date and get their explicit yes."
    problems = validate_checklist(tmp_path / "c.yaml", policy_text=POLICY.read_text(encoding="utf-8"), tools=[])
    assert [p for p in problems if "renew_loan-confirmed" in str(p.field) or "requirements.1" in str(p.field)] == []


def _write_tools(tmp_path: Path, *names: str) -> Path:
    schemas = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}, "x-mutating": True}
        for name in names
    ]
    (tmp_path / "t.json").write_text(json.dumps(schemas), encoding="utf-8")
    return tmp_path / "t.json"


@pytest.mark.parametrize(
    ("sentence", "confirmed"),
    [
        ("Before cancelling an order, get the customer's explicit yes.", {"cancel_order"}),
        ("Confirm the refund amount with the customer before you issue it.", {"issue_refund"}),
    ],
)
def test_a_sentence_about_one_write_confirms_that_tool_only(tmp_path: Path, sentence: str, confirmed: set[str]) -> None:
    (tmp_path / "p.md").write_text(f"Be polite.\n{sentence}\n", encoding="utf-8")
    write_skeleton(
        tmp_path / "p.md",
        str(_write_tools(tmp_path, "cancel_order", "issue_refund", "change_plan")),
        tmp_path / "c.yaml",
    )
    checklist = load_checklist(tmp_path / "c.yaml")
    assert checklist.general_rules == []
    assert {t for t, spec in checklist.tools.items() if any(r.confirmation for r in spec.requirements)} == confirmed


@pytest.mark.parametrize(
    "sentence",
    [
        "Before taking any action that updates the database, obtain explicit user confirmation (yes).",
        "Always get the user's explicit yes first.",
    ],
)
def test_a_sentence_about_every_write_or_no_tool_is_a_general_rule(tmp_path: Path, sentence: str) -> None:
    (tmp_path / "p.md").write_text(sentence + "\n", encoding="utf-8")
    write_skeleton(tmp_path / "p.md", str(_write_tools(tmp_path, "cancel_order", "issue_refund")), tmp_path / "c.yaml")
    checklist = load_checklist(tmp_path / "c.yaml")
    assert [(r.id, r.confirmation, r.source) for r in checklist.general_rules] == [("user-confirmed", True, sentence)]
    assert not any(r.confirmation for spec in checklist.tools.values() for r in spec.requirements)


def test_tools_whose_names_are_no_plain_ids_get_requirement_ids_of_their_own(tmp_path: Path) -> None:
    """Requirement ids are unique across tools: two odd names must not both give 'tool-todo'."""
    (tmp_path / "p.md").write_text("Be polite.\n", encoding="utf-8")
    write_skeleton(tmp_path / "p.md", str(_write_tools(tmp_path, "refund order", "cancel order")), tmp_path / "c.yaml")
    ids = [r.id for spec in load_checklist(tmp_path / "c.yaml").tools.values() for r in spec.requirements]
    assert ids == ["tool1-todo", "tool2-todo"]


def test_init_adds_no_confirmation_rule_when_the_policy_asks_for_none(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("Only write what the user asked for.\n")
    write_skeleton(tmp_path / "p.md", str(TOOLS), tmp_path / "c.yaml")
    assert load_checklist(tmp_path / "c.yaml").general_rules == []


def test_init_refuses_to_overwrite_an_existing_file_without_force(
    domain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checklist someone edited is never clobbered by a second init; --force replaces it."""
    (domain / "c.yaml").write_text("my edits\n")
    args = ["checklist", "init", "--policy", "library_policy.md", "--tools", "library_tools.json", "-o", "c.yaml"]
    assert _cli(*args) == 2
    err = capsys.readouterr().err
    assert err.strip() == "policyguard: error: c.yaml: already exists; pass --force to overwrite it"
    assert (domain / "c.yaml").read_text() == "my edits\n"
    assert _cli(*args, "--force") == 0
    assert load_checklist(domain / "c.yaml").tools["renew_loan"].mutating is True
    assert [p.name for p in domain.iterdir() if p.name.endswith(".tmp")] == []  # no temp file left behind


@pytest.mark.parametrize(
    ("policy", "tools", "named"),
    [
        ("missing.md", "library_tools.json", "missing.md: cannot read policy: No such file or directory"),
        ("library_policy.md", "bad.json", "bad.json: not valid JSON"),
        ("library_policy.md", "missing.json", "'missing.json': not an existing JSON file"),
        ("library_policy.md", "notalist.json", "notalist.json: expected a JSON list of tools"),
    ],
)
def test_init_names_the_unreadable_file_in_one_line_and_exits_2(
    domain: Path, capsys: pytest.CaptureFixture[str], policy: str, tools: str, named: str
) -> None:
    """No traceback and no output file when the policy or the tools cannot be read."""
    (domain / "bad.json").write_text("[{")
    (domain / "notalist.json").write_text('{"name": "x"}')
    assert _cli("checklist", "init", "--policy", policy, "--tools", tools, "-o", "c.yaml") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and err.startswith("policyguard: error: ")
    assert not (domain / "c.yaml").exists()


def test_init_refuses_a_policy_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_bytes(b"\xff\xfe policy")
    with pytest.raises(InitError, match=r"p\.md: cannot read policy: not UTF-8"):
        write_skeleton(tmp_path / "p.md", str(TOOLS), tmp_path / "c.yaml")


def test_init_raises_tools_error_for_a_tool_without_a_name(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text('[{"type": "function", "function": {"parameters": {}}}]')
    with pytest.raises(ToolsError, match=r"t\.json: tools\[0\]: the tool has no name"):
        write_skeleton(POLICY, str(tmp_path / "t.json"), tmp_path / "c.yaml")


# ---------------------------------------------------------------- read-only only from declarations

_FLAG = st.sampled_from([None, True, False])


@settings(max_examples=60, deadline=None)
@given(x_mutating=_FLAG, read_only=_FLAG, destructive=_FLAG)
def test_a_tool_is_read_only_only_when_declared_and_nothing_says_it_writes(
    x_mutating: bool | None, read_only: bool | None, destructive: bool | None
) -> None:
    """x-mutating false or readOnlyHint true make a tool read-only, unless any declaration says it writes."""
    tool: dict[str, Any] = {"type": "function", "function": {"name": "t", "parameters": {}}}
    annotations = {k: v for k, v in (("readOnlyHint", read_only), ("destructiveHint", destructive)) if v is not None}
    if annotations:
        tool["annotations"] = annotations
    if x_mutating is not None:
        tool["x-mutating"] = x_mutating
    from policyguard.authoring.tools import tool_from_schema

    text = skeleton("p", "policy", "p.md", [tool_from_schema(tool)], "t.json")
    spec = parse_checklist(text).tools["t"]
    declared_read = x_mutating is False or read_only is True
    declared_write = x_mutating is True or read_only is False or destructive is True
    assert spec.mutating is (not declared_read or declared_write)
    assert bool(spec.requirements) is spec.mutating


def test_init_reads_a_tau2_toolkit_by_its_tool_types(tmp_path: Path) -> None:
    """tau2 ToolType.READ is read-only, WRITE and GENERIC are mutating."""
    pytest.importorskip("tau2")
    write_skeleton(POLICY, "tau2.domains.airline.tools:AirlineTools", tmp_path / "c.yaml")
    tools = load_checklist(tmp_path / "c.yaml").tools
    assert tools["get_user_details"].mutating is False
    assert tools["book_reservation"].mutating is True
    assert tools["transfer_to_human_agents"].mutating is True  # GENERIC declares nothing


def test_init_quotes_a_tool_name_yaml_would_misread(tmp_path: Path) -> None:
    """A name like 'yes' or one with a colon stays a string key, and its requirement id stays valid."""
    (tmp_path / "t.json").write_text(
        json.dumps([{"name": "yes", "parameters": {}}, {"name": "a: b", "parameters": {}}])
    )
    write_skeleton(POLICY, str(tmp_path / "t.json"), tmp_path / "c.yaml")
    tools = load_checklist(tmp_path / "c.yaml").tools
    assert set(tools) == {"yes", "a: b"} and all(spec.mutating for spec in tools.values())


# ---------------------------------------------------------------- the finished checklist and the loop


def test_the_guides_checklist_validates_clean_with_policy_and_tools(domain: Path) -> None:
    """No error and no warning once the TODO is written as the guide writes it."""
    (domain / "library.yaml").write_text(_block("checklist"), encoding="utf-8")
    tools = json.loads(_block("tools"))
    assert validate_checklist(domain / "library.yaml", policy_text=_block("policy"), tools=tools) == []
    assert (
        _cli("checklist", "validate", "library.yaml", "--policy", "library_policy.md", "--tools", "library_tools.json")
        == 0
    )


def test_the_guides_loop_allows_a_complying_renewal_and_blocks_the_rest(
    domain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """L1 is renewed; L2 (renewed twice) is blocked naming renewal-limit; renew_loans is an unknown tool."""
    (domain / "library.yaml").write_text(_block("checklist"), encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": "guide_loop"}
    exec(compile(_block("loop"), str(GUIDE), "exec"), namespace)
    assert capsys.readouterr().out == _block("output")
    assert namespace["LOANS"]["L1"]["renewals"] == 1
    assert namespace["LOANS"]["L2"]["renewals"] == 2  # the blocked renewal never ran
    blocked = namespace["messages"][-3]["content"]
    assert "does not meet requirement renewal-limit," in blocked
    assert "Did you mean 'renew_loan'?" in namespace["messages"][-1]["content"]


def _loop(domain: Path, get_member: Any, get_loan: Any) -> list[str]:
    """Look the member up, read L1, renew L1; the contents the loop appended."""
    (domain / "library.yaml").write_text(_block("checklist"), encoding="utf-8")
    guard = Guard.from_files(policy="library_policy.md", checklist="library.yaml", model="none")
    renewed: list[str] = []
    tools = GuardedTools(
        guard, {"get_member": get_member, "get_loan": get_loan, "renew_loan": lambda loan_id: renewed.append(loan_id)}
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Card M1, renew L1."}]
    for index, (name, args) in enumerate(
        [("get_member", {"member_id": "M1"}), ("get_loan", {"loan_id": "L1"}), ("renew_loan", {"loan_id": "L1"})]
    ):
        call = {"id": f"c{index}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(tools.openai_chat(call, messages))
    assert renewed == []
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_loan_read_as_plain_text_is_no_fact_and_the_block_says_why(domain: Path) -> None:
    """The guide's promise: the message says the result is not JSON, not just 'call get_loan first'."""
    member = {"member_id": "M1", "fines": 0}
    contents = _loop(domain, lambda member_id: member, lambda loan_id: f"Loan {loan_id}, due 2999-01-10")
    assert "the get_loan result is not JSON" in contents[-1]


def test_someone_elses_loan_and_unpaid_fines_are_blocked_naming_the_rules(domain: Path) -> None:
    member = {"member_id": "M1", "fines": 12}
    loan = {"loan_id": "L1", "member_id": "M2", "due": "2999-01-10", "renewals": 0}
    contents = _loop(domain, lambda member_id: member, lambda loan_id: loan)
    assert "requirement own-loan," in contents[-1] and "requirement fines-paid," in contents[-1]


def test_an_overdue_loan_is_blocked(domain: Path) -> None:
    member = {"member_id": "M1", "fines": 0}
    loan = {"loan_id": "L1", "member_id": "M1", "due": "2000-01-10", "renewals": 0}
    contents = _loop(domain, lambda member_id: member, lambda loan_id: loan)
    assert "does not meet requirement not-overdue," in contents[-1]


# ---------------------------------------------------------------- the guide's confirmation, judged by a verifier

_RENEW = ToolCall(id="c2", name="renew_loan", arguments={"loan_id": "L1"})


def _renewal_dialogue(*, member_replies: bool) -> Trajectory:
    """5 is the agent's question; 6, when present, the member's yes; the renewal is the last message."""
    member = ToolCall(id="c0", name="get_member", arguments={"member_id": "M1"})
    loan = ToolCall(id="c1", name="get_loan", arguments={"loan_id": "L1"})
    messages = [
        Message(role="user", content="Card M1, please renew L1."),
        Message(role="assistant", tool_calls=[member]),
        Message(role="tool", tool_call_id="c0", content=json.dumps({"member_id": "M1", "fines": 0})),
        Message(role="assistant", tool_calls=[loan]),
        Message(
            role="tool",
            tool_call_id="c1",
            content=json.dumps({"loan_id": "L1", "member_id": "M1", "due": "2999-01-10", "renewals": 0}),
        ),
        Message(role="assistant", content="Renewing L1 moves its due date to 2999-01-24. Shall I go ahead?"),
    ]
    if member_replies:
        messages.append(Message(role="user", content="Yes, please."))
    messages.append(Message(role="assistant", tool_calls=[_RENEW]))
    return Trajectory(messages=messages)


def _verifier_cites(confirmed: list[int]) -> str:
    """A PASS judging every requirement MET: the data ones on the reads (2, 4), `confirmed` on ``confirmed``."""
    ids = ["own-loan", "renewal-limit", "not-overdue", "fines-paid"]
    items = [{"id": rid, "status": "MET", "evidence": "2 and 4", "evidence_messages": [2, 4]} for rid in ids]
    items.append({"id": "confirmed", "status": "MET", "evidence": "the yes", "evidence_messages": confirmed})
    return json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})


@pytest.mark.parametrize(
    ("member_replies", "cites", "outcome"),
    [
        (True, [6], "allow"),  # the member's own yes, after the agent's question
        (True, [5], "block"),  # the agent's own question
        (False, [5], "block"),  # the agent asked, the member never answered
        (True, [60], "block"),  # a message that does not exist
    ],
)
def test_the_guides_confirmation_passes_only_on_the_members_own_reply(
    domain: Path, member_replies: bool, cites: list[int], outcome: str
) -> None:
    """`confirmed` ("the member said yes", confirmation: true): a verifier's MET must cite the member's reply."""
    (domain / "library.yaml").write_text(_block("checklist"), encoding="utf-8")
    checklist = load_checklist(domain / "library.yaml")
    model = ScriptedModel([_verifier_cites(cites)])
    guard = Guard(checklist, _block("policy"), verifier=LLMVerifier(model))
    decision = guard.check(_RENEW, _renewal_dialogue(member_replies=member_replies))
    model.assert_complete()
    assert decision.outcome == outcome
    confirmed = next(r for r in decision.requirements if r.id == "confirmed")
    assert confirmed.status == ("MET" if outcome == "allow" else "NOT_MET")


# ---------------------------------------------------------------- section 7: money effects and approvals


def _deposit_files(folder: Path) -> tuple[Path, Path]:
    policy = folder / "deposit_policy.md"
    policy.write_text(_block("deposit-policy"), encoding="utf-8")
    checklist = folder / "deposits.yaml"
    checklist.write_text(_block("deposit-checklist"), encoding="utf-8")
    return policy, checklist


@pytest.mark.parametrize("marker", ["deposit-checklist", "deposit-approved-by"])
def test_every_checklist_of_the_money_section_loads_and_validates_clean(marker: str, tmp_path: Path) -> None:
    """Each YAML block is a whole checklist: the package's loader reads it, quotes and pin match the policy."""
    path = tmp_path / f"{marker}.yaml"
    path.write_text(_block(marker), encoding="utf-8")
    checklist = load_checklist(path)
    checklist.check_policy(_block("deposit-policy"))
    problems = validate_checklist(path, policy_text=_block("deposit-policy"))
    assert [p for p in problems if p.severity == "error"] == []
    effect = checklist.tools["refund_deposit"].effect
    assert effect is not None and (effect.ceiling, effect.approval_threshold) == (200, 50)


def test_the_money_section_names_only_effect_fields_that_exist() -> None:
    """Every `effect:` key the prose explains is a field of EffectSpec (the schema forbids others)."""
    from policyguard.checklist.schema import EffectSpec

    section = GUIDE.read_text(encoding="utf-8").split("## 7. Money and approvals", 1)[1]
    named = set(re.findall(r"^- `([a-z_]+)`", section, re.M)) | {"approved_by"}
    assert named <= set(EffectSpec.model_fields)


def test_the_approvals_example_escalates_allows_once_and_blocks_above_the_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _deposit_files(tmp_path)
    exec(compile(_block("deposit-approvals"), "writing-checklists.md#approvals", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.splitlines() == ["escalate", "allow", "block"]
    assert main(["approvals", "list", "--store", "sqlite:///guard.db", "--status", "used"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert "refund_deposit  principal=M1" in line and "failed=effect-approval" in line


def test_requirement_ids_are_unique_across_tools_as_the_guide_says(domain: Path) -> None:
    """The guide promises a repeated id is refused with the second one's line, across tools too."""
    assert "`id` is unique across the whole checklist, not only within its tool" in GUIDE.read_text(encoding="utf-8")
    text = (
        f'policy: {{name: p, version: "{policy_version("p")}"}}\n'
        "tools:\n"
        "  renew_loan:\n"
        "    requirements:\n"
        "      - {id: own-loan, text: The loan is the member's., kind: procedural, source: s}\n"
        "  return_loan:\n"
        "    requirements:\n"
        "      - {id: own-loan, text: The loan is the member's., kind: procedural, source: s}\n"
    )
    with pytest.raises(ChecklistError, match="duplicate requirement id 'own-loan'") as raised:
        parse_checklist(text, file="c.yaml")
    assert raised.value.line == 8
