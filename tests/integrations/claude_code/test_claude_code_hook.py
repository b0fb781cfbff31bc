"""The Claude Code hook: what PreToolUse answers, what PostToolUse records, and how it fails closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from examples import refund_desk as desk
from policyguard import Guard
from policyguard.decision import Decision
from policyguard.integrations.claude_code import ClaudeCodeHook, HookInputError, McpNames
from policyguard.session import MemorySessionStore

from .shapes import Transcript, post, pre, text, use

ORDER_O1 = {"order_id": "O1", "customer_id": "C1", "captured": 80.0, "currency": "USD"}
ADA = {"customer_id": "C1", "name": "Ada", "email": "ada@example.com"}


def desk_guard(**kwargs: Any) -> Guard:
    return Guard.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST, sessions=MemorySessionStore(), **kwargs)


def decision_of(answer: dict[str, Any]) -> str | None:
    """The permissionDecision of a PreToolUse answer; None for no opinion."""
    return answer.get("hookSpecificOutput", {}).get("permissionDecision")


def ran(hook: ClaudeCodeHook, t: Transcript, call_id: str, name: str, response: Any, **args: Any) -> dict[str, Any]:
    """One call as Claude Code runs it: the model's tool_use in the transcript, PreToolUse, and when not denied
    the tool's result in the transcript and PostToolUse."""
    t.assistant(use(call_id, name, **args))
    answer = hook.answer(pre(t, call_id, name, **args))
    if decision_of(answer) != "deny":
        t.result(call_id, response)
        hook.answer(post(t, call_id, name, response, **args))
    return answer


@pytest.fixture
def t(tmp_path: Path) -> Transcript:
    transcript = Transcript(tmp_path / "session.jsonl")
    transcript.user("Hi, I'm ada@example.com. Please refund order O1, 80 dollars.")
    return transcript


def identified(hook: ClaudeCodeHook, t: Transcript, mcp: str = "") -> None:
    ran(hook, t, "toolu_01", f"{mcp}find_customer", ADA, email="ada@example.com")
    ran(hook, t, "toolu_02", f"{mcp}get_order", ORDER_O1, order_id="O1")
    t.assistant(text("I can refund 80 USD on order O1. Shall I go ahead?"))
    t.user("Yes, please refund the 80 dollars.")


def test_a_refund_within_the_captured_amount_gets_no_opinion_so_claude_codes_own_rules_still_apply(
    t: Transcript,
) -> None:
    hook = ClaudeCodeHook(desk_guard())
    identified(hook, t)
    assert ran(hook, t, "toolu_03", "issue_refund", {"status": "refunded"}, order_id="O1", amount=80) == {}


def test_with_allow_a_pass_answers_allow(t: Transcript) -> None:
    hook = ClaudeCodeHook(desk_guard(), allow=True)
    identified(hook, t)
    assert decision_of(ran(hook, t, "toolu_03", "issue_refund", "ok", order_id="O1", amount=80)) == "allow"


def test_a_refund_over_the_captured_amount_is_denied_with_the_remediation_claude_reads(t: Transcript) -> None:
    hook = ClaudeCodeHook(desk_guard())
    identified(hook, t)
    answer = ran(hook, t, "toolu_03", "issue_refund", "ok", order_id="O1", amount=120)
    assert answer["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert decision_of(answer) == "deny"
    assert "captured" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_refund_with_no_order_read_is_denied(t: Transcript) -> None:
    hook = ClaudeCodeHook(desk_guard())
    assert decision_of(ran(hook, t, "toolu_03", "issue_refund", "ok", order_id="O1", amount=10)) == "deny"


def test_the_facts_come_from_post_tool_use_when_the_transcript_lags(tmp_path: Path) -> None:
    """The transcript never shows the reads' results; PostToolUse put them in the record."""
    hook, t = ClaudeCodeHook(desk_guard()), Transcript(tmp_path / "lagging.jsonl")
    t.user("I'm ada@example.com; refund O1, 80 dollars. Yes, go ahead with 80.")
    for call_id, name, response, args in [
        ("toolu_01", "find_customer", ADA, {"email": "ada@example.com"}),
        ("toolu_02", "get_order", ORDER_O1, {"order_id": "O1"}),
    ]:
        assert hook.answer(pre(t, call_id, name, **args)) == {}
        hook.answer(post(t, call_id, name, response, **args))
    assert decision_of(hook.answer(pre(t, "toolu_03", "issue_refund", order_id="O1", amount=80))) is None
    assert decision_of(hook.answer(pre(t, "toolu_04", "issue_refund", order_id="O1", amount=81))) == "deny"


def test_mcp_tool_names_are_judged_by_their_tool_name_with_the_server_prefix_stripped(t: Transcript) -> None:
    hook = ClaudeCodeHook(desk_guard())
    identified(hook, t, mcp="mcp__desk__")
    assert decision_of(ran(hook, t, "toolu_03", "mcp__desk__issue_refund", "ok", order_id="O1", amount=120)) == "deny"
    assert ran(hook, t, "toolu_04", "mcp__desk__issue_refund", "ok", order_id="O1", amount=80) == {}


def test_a_server_whose_names_are_kept_is_an_unknown_tool_and_denied(t: Transcript) -> None:
    hook = ClaudeCodeHook(desk_guard(), names=McpNames({"other": "keep"}))
    answer = hook.answer(pre(t, "toolu_09", "mcp__other__delete_everything"))
    assert decision_of(answer) == "deny"


def test_the_name_rules() -> None:
    names = McpNames.parse(["billing=prefix:billing.", "raw=keep"])
    assert names("mcp__desk__issue_refund") == "issue_refund"
    assert names("mcp__billing__issue_refund") == "billing.issue_refund"
    assert names("mcp__raw__issue_refund") == "mcp__raw__issue_refund"
    assert names("Bash") == "Bash"
    with pytest.raises(Exception, match="strip, keep or prefix"):
        McpNames.parse(["desk=drop"])


def test_an_unreadable_transcript_line_is_a_deny_naming_it(t: Transcript) -> None:
    with t.path.open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    answer = ClaudeCodeHook(desk_guard()).answer(pre(t, "toolu_03", "get_order", order_id="O1"))
    assert decision_of(answer) == "deny"
    assert "line 2" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_missing_transcript_is_a_deny(t: Transcript) -> None:
    event = {**pre(t, "toolu_03", "get_order", order_id="O1"), "transcript_path": str(t.path) + ".gone"}
    assert decision_of(ClaudeCodeHook(desk_guard()).answer(event)) == "deny"


def test_an_error_in_the_guard_is_a_deny(t: Transcript) -> None:
    class Broken(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            raise RuntimeError("store down")

    broken = Broken.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST)
    answer = ClaudeCodeHook(broken).answer(pre(t, "toolu_03", "get_order", order_id="O1"))
    assert decision_of(answer) == "deny"
    assert "store down" in answer["hookSpecificOutput"]["permissionDecisionReason"]


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Decision.await_approval("ap-1", "Refunds above 50 need a supervisor."), "ask"),
        (Decision.halt("gate", "The session is compromised."), "deny"),
    ],
)
def test_an_escalation_asks_the_person_and_a_halt_denies_and_stops_claude(
    t: Transcript, decision: Decision, expected: str
) -> None:
    class Fixed(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            return decision

    hook = ClaudeCodeHook(Fixed.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST))
    answer = hook.answer(pre(t, "toolu_03", "issue_refund", order_id="O1", amount=60))
    assert decision_of(answer) == expected
    assert answer["hookSpecificOutput"]["permissionDecisionReason"] == decision.message
    assert answer.get("continue", True) is (decision.outcome != "halt")


@pytest.mark.parametrize(
    "event",
    [
        "not json",
        "[1, 2]",
        json.dumps({"hook_event_name": "PreToolUse", "tool_name": "get_order"}),  # no session_id
        json.dumps({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "get_order", "tool_input": {}}),
        json.dumps({"session_id": "s", "hook_event_name": "Stop"}),
    ],
)
def test_an_event_that_cannot_be_read_raises_so_the_command_exits_2(event: str) -> None:
    with pytest.raises(HookInputError):
        ClaudeCodeHook(desk_guard()).answer(event)


def test_post_tool_use_failure_records_a_failed_result(t: Transcript) -> None:
    guard = desk_guard()
    hook = ClaudeCodeHook(guard)
    t.assistant(use("toolu_01", "get_order", order_id="O1"))
    hook.answer(pre(t, "toolu_01", "get_order", order_id="O1"))
    failure = {**pre(t, "toolu_01", "get_order", order_id="O1"), "hook_event_name": "PostToolUseFailure",
               "error": "connection reset"}  # fmt: skip
    assert hook.answer(failure) == {}
    assert decision_of(hook.answer(pre(t, "toolu_02", "issue_refund", order_id="O1", amount=10))) == "deny"


def test_mcp_tool_responses_are_read_as_their_text_and_error_flag() -> None:
    from policyguard.integrations.claude_code import response_text

    assert response_text({"content": [{"type": "text", "text": "done"}], "isError": True}) == ("done", True)
    assert response_text([{"type": "text", "text": "a"}, {"type": "image"}]) == ("a\n[image]", False)
    assert response_text({"stdout": "x", "exit_code": 0}) == ('{"exit_code": 0, "stdout": "x"}', False)
