"""The Claude Agent SDK's hooks: what PreToolUse answers, what PostToolUse records, how they fail closed.

Most tests drive the real SDK (``query``) against ``examples/claude_code_stand_in.py``, a
stand-in for the ``claude`` CLI that speaks the SDK's control protocol: it registers the
hooks at ``initialize``, sends ``hook_callback`` requests as Claude Code does, writes the
transcript, and reports each PreToolUse decision in its result message. So the hooks are
tested through the SDK's own dispatch, with no key and no model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

claude_agent_sdk = pytest.importorskip(
    "claude_agent_sdk", reason="the Claude Agent SDK integration needs the claude-agent-sdk extra"
)

from claude_agent_sdk import (  # noqa: E402
    ClaudeAgentOptions,
    HookMatcher,
    ResultMessage,
    ToolResultBlock,
    UserMessage,
    create_sdk_mcp_server,
    query,
    tool,
)
from claude_agent_sdk._internal.query import _convert_hook_output_for_cli  # noqa: E402
from claude_agent_sdk.types import PostToolUseHookInput, PreToolUseHookInput  # noqa: E402

from examples import claude_code_stand_in as stand_in  # noqa: E402
from examples import refund_desk as desk  # noqa: E402
from policyguard import Guard  # noqa: E402
from policyguard.decision import Decision  # noqa: E402
from policyguard.integrations.claude_agent_sdk import (  # noqa: E402
    DECISION_TIMEOUT_S,
    HOOK_TIMEOUT_S,
    PolicyGuardHooks,
    guard_hooks,
)
from policyguard.session import MemorySessionStore  # noqa: E402
from tests.session.credits import make_guard  # noqa: E402

ORDER_O1 = {"order_id": "O1", "customer_id": "C1", "captured": 80.0, "currency": "USD"}
ADA = {"customer_id": "C1", "name": "Ada", "email": "ada@example.com"}
REFUND_ASK = "Hi, I'm ada@example.com. Please refund order O1, 80 dollars."


def call(call_id: str, name: str, result: Any = "ok", **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": arguments, "result": result}


def message(*calls: dict[str, Any], **step: Any) -> dict[str, Any]:
    """One assistant message asking for these calls (``order``, ``agent_id``, ``sidechain``... as the stand-in reads)."""
    return {"calls": list(calls), **step}


@dataclass
class Run:
    """What came back through the SDK: each PreToolUse decision, and each tool result the model read."""

    decisions: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    results: dict[str, ToolResultBlock] = field(default_factory=dict)

    def decision(self, call_id: str) -> str | None:
        """The decision on the last PreToolUse of ``call_id`` (None: no opinion)."""
        return [d for i, d, _ in self.decisions if i == call_id][-1]

    def reason(self, call_id: str) -> str:
        return [r for i, _, r in self.decisions if i == call_id][-1] or ""


def run(
    hooks: dict[Any, list[HookMatcher]],
    folder: Path,
    *turn: dict[str, Any],
    session: str = "s1",
    prompt: str = REFUND_ASK,
    **options: Any,
) -> Run:
    """One ``query`` of the real SDK, with the stand-in CLI playing ``turn``."""
    script = {"session_id": session, "transcript": str(folder / f"{session}.jsonl"), "turns": [list(turn)]}
    opts = ClaudeAgentOptions(
        cli_path=stand_in.cli_path(folder), hooks=hooks, env={"STAND_IN_SCRIPT": json.dumps(script)}, **options
    )
    out = Run()

    async def drive() -> None:
        async for msg in query(prompt=prompt, options=opts):
            if isinstance(msg, UserMessage) and isinstance(msg.content, list):
                out.results.update({b.tool_use_id: b for b in msg.content if isinstance(b, ToolResultBlock)})
            if isinstance(msg, ResultMessage):
                out.decisions += [tuple(d) for d in json.loads(msg.result or "{}")["decisions"]]  # type: ignore[misc]

    asyncio.run(asyncio.wait_for(drive(), 60))
    return out


def desk_guard(**kwargs: Any) -> Guard:
    return Guard.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST, sessions=MemorySessionStore(), **kwargs)


def identified(mcp: str = "") -> list[dict[str, Any]]:
    """The agent finds the customer, reads the order, offers 80 and the customer says yes."""
    return [
        message(call("toolu_01", f"{mcp}find_customer", ADA, email="ada@example.com")),
        message(call("toolu_02", f"{mcp}get_order", ORDER_O1, order_id="O1")),
        {"say": "I can refund 80 USD on order O1. Shall I go ahead?"},
        {"user": "Yes, please refund the 80 dollars."},
    ]


# --- decisions, through the SDK ---------------------------------------------------------------


def test_a_refund_over_the_captured_amount_is_denied_with_the_remediation_the_model_reads(tmp_path: Path) -> None:
    out = run(guard_hooks(desk_guard()), tmp_path, *identified(),
              message(call("toolu_03", "issue_refund", order_id="O1", amount=120)))  # fmt: skip
    assert out.decision("toolu_03") == "deny"
    assert "within-captured" in out.reason("toolu_03")
    assert out.results["toolu_03"].is_error is True  # the CLI hands the reason to the model as the result


def test_a_refund_within_the_captured_amount_gets_no_opinion_so_the_sdks_own_permissions_still_apply(
    tmp_path: Path,
) -> None:
    out = run(guard_hooks(desk_guard()), tmp_path, *identified(),
              message(call("toolu_03", "issue_refund", {"status": "refunded"}, order_id="O1", amount=80)))  # fmt: skip
    assert out.decisions == [("toolu_01", None, None), ("toolu_02", None, None), ("toolu_03", None, None)]
    assert not out.results["toolu_03"].is_error


def test_with_allow_a_pass_answers_allow(tmp_path: Path) -> None:
    out = run(guard_hooks(desk_guard(), allow=True), tmp_path, *identified(),
              message(call("toolu_03", "issue_refund", order_id="O1", amount=80)))  # fmt: skip
    assert out.decision("toolu_03") == "allow"


def test_a_refund_with_no_order_read_is_denied(tmp_path: Path) -> None:
    out = run(guard_hooks(desk_guard()), tmp_path, message(call("toolu_03", "issue_refund", order_id="O1", amount=10)))
    assert out.decision("toolu_03") == "deny"


def test_an_in_process_mcp_tool_is_judged_by_its_tool_name_and_a_denied_call_never_reaches_it(tmp_path: Path) -> None:
    refunds: list[dict[str, Any]] = []

    @tool("issue_refund", "Refund money on an order.", {"order_id": str, "amount": float})
    async def issue_refund(args: dict[str, Any]) -> dict[str, Any]:
        refunds.append(args)
        return {"content": [{"type": "text", "text": json.dumps({"status": "refunded", **args})}]}

    @tool("get_order", "Look up one order.", {"order_id": str})
    async def get_order(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": json.dumps(ORDER_O1)}]}

    @tool("find_customer", "Look up a customer by email.", {"email": str})
    async def find_customer(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": json.dumps(ADA)}]}

    server = create_sdk_mcp_server("desk", tools=[find_customer, get_order, issue_refund])
    out = run(guard_hooks(desk_guard()), tmp_path, *identified("mcp__desk__"),
              message(call("toolu_03", "mcp__desk__issue_refund", order_id="O1", amount=120)),
              message(call("toolu_04", "mcp__desk__issue_refund", order_id="O1", amount=80)),
              mcp_servers={"desk": server})  # fmt: skip
    assert (out.decision("toolu_03"), out.decision("toolu_04")) == ("deny", None)
    assert refunds == [{"order_id": "O1", "amount": 80}]


def test_a_tool_the_checklist_does_not_cover_is_denied_as_unknown(tmp_path: Path) -> None:
    out = run(guard_hooks(desk_guard()), tmp_path, message(call("toolu_09", "Bash", command="rm -rf build")))
    assert out.decision("toolu_09") == "deny"


def test_a_narrower_matcher_leaves_other_tools_to_the_sdk(tmp_path: Path) -> None:
    hooks = guard_hooks(desk_guard(), matcher="^(mcp__[A-Za-z0-9_-]+__)?(find_customer|get_order|issue_refund)$")
    out = run(hooks, tmp_path, message(call("toolu_09", "Bash", command="ls")),
              message(call("toolu_10", "issue_refund", order_id="O1", amount=10)))  # fmt: skip
    assert (out.decision("toolu_09"), out.decision("toolu_10")) == (None, "deny")


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (Decision.await_approval("ap-1", "Refunds above 50 need a supervisor."), "ask"),
        (Decision.halt("gate", "The session is compromised."), "deny"),
    ],
)
def test_an_escalation_asks_and_a_halt_denies(tmp_path: Path, decision: Decision, expected: str) -> None:
    class Fixed(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            return decision

    guard = Fixed.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST)
    out = run(guard_hooks(guard), tmp_path, message(call("toolu_03", "issue_refund", order_id="O1", amount=60)))
    assert (out.decision("toolu_03"), out.reason("toolu_03")) == (expected, decision.message)


def test_a_halt_stops_claude_in_the_sdks_spelling_of_continue(tmp_path: Path) -> None:
    """The SDK's Python output spells ``continue_``; it sends ``continue`` to the CLI."""

    class Halting(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            return Decision.halt("gate", "The session is compromised.")

    hooks = PolicyGuardHooks(Halting.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST))
    event = pre_event(tmp_path, "toolu_03", "issue_refund", order_id="O1", amount=60)
    answer = asyncio.run(hooks.pre_tool_use(event, "toolu_03", {"signal": None}))
    assert answer["continue_"] is False  # type: ignore[typeddict-item]
    wire = _convert_hook_output_for_cli(dict(answer))
    assert wire["continue"] is False and wire["hookSpecificOutput"]["permissionDecision"] == "deny"


# --- failing closed ---------------------------------------------------------------------------


def test_an_error_in_the_guard_is_a_deny(tmp_path: Path) -> None:
    class Broken(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            raise RuntimeError("store down")

    guard = Broken.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST)
    out = run(guard_hooks(guard), tmp_path, message(call("toolu_03", "get_order", order_id="O1")))
    assert out.decision("toolu_03") == "deny" and "store down" in out.reason("toolu_03")


def test_no_decision_within_the_timeout_is_a_deny(tmp_path: Path) -> None:
    class Slow(Guard):
        def check(self, *args: Any, **kwargs: Any) -> Decision:
            time.sleep(1.5)
            return Decision.allow("gate")

    guard = Slow.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST)
    out = run(
        guard_hooks(guard, decision_timeout_s=0.2), tmp_path, message(call("toolu_03", "get_order", order_id="O1"))
    )
    assert out.decision("toolu_03") == "deny" and "no decision within 0.2 s" in out.reason("toolu_03")


def test_an_event_that_cannot_be_read_is_a_deny_not_an_exception(tmp_path: Path) -> None:
    """The SDK answers a raising callback with an error, which Claude Code reads as no decision unless the
    matcher says on_failure="block": the callback itself never raises."""
    hooks = PolicyGuardHooks(desk_guard())
    for event in ({}, {"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "get_order"}):
        answer = asyncio.run(hooks.pre_tool_use(event, None, {"signal": None}))  # type: ignore[arg-type]
        assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"  # type: ignore[typeddict-item]


def test_an_unreadable_transcript_is_a_deny(tmp_path: Path) -> None:
    (tmp_path / "s1.jsonl").write_text("{not json\n", encoding="utf-8")
    hooks = PolicyGuardHooks(desk_guard())
    answer = asyncio.run(hooks.pre_tool_use(pre_event(tmp_path, "toolu_03", "get_order", order_id="O1"), "toolu_03",
                                            {"signal": None}))  # fmt: skip
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"  # type: ignore[typeddict-item]


def test_the_matchers_block_on_a_failed_callback_and_outlast_the_decision_timeout() -> None:
    hooks = guard_hooks(desk_guard())
    assert set(hooks) == {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
    for matchers in hooks.values():
        [matcher] = matchers
        assert matcher.on_failure == "block" and matcher.matcher is None
        assert matcher.timeout == HOOK_TIMEOUT_S > DECISION_TIMEOUT_S
    ClaudeAgentOptions(hooks=hooks)  # the options accept them as they are


def test_the_bundled_claude_cli_registers_the_hooks_and_honours_on_failure_block(tmp_path: Path) -> None:
    """The real CLI the SDK ships answers ``initialize`` offline; the SDK refuses to connect (CLIConnectionError)
    if it does not honour ``onFailure: "block"``. No prompt is sent, so no model is asked."""
    from claude_agent_sdk import ClaudeSDKClient

    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    if not bundled.is_file():
        pytest.skip("this claude-agent-sdk wheel bundles no claude CLI")
    env = {"HOME": str(tmp_path), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    async def connect() -> dict[str, Any]:
        async with ClaudeSDKClient(ClaudeAgentOptions(hooks=guard_hooks(desk_guard()), env=env)) as client:
            info = await client.get_server_info()
        return info or {}

    info = asyncio.run(asyncio.wait_for(connect(), 60))
    assert info["hooks_applied"] is True and info["hook_on_failure_supported"] is True


def test_a_result_that_cannot_be_recorded_is_logged_and_the_callback_still_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Forgetful(Guard):
        def record_result(self, *args: Any, **kwargs: Any) -> bool:
            raise RuntimeError("store down")

    hooks = PolicyGuardHooks(Forgetful.from_files(policy=desk.POLICY, checklist=desk.CHECKLIST))
    event: PostToolUseHookInput = {**pre_event(tmp_path, "toolu_01", "get_order", order_id="O1"),  # type: ignore[typeddict-item]
                                   "hook_event_name": "PostToolUse", "tool_response": json.dumps(ORDER_O1)}  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="policyguard"):
        assert asyncio.run(hooks.post_tool_use(event, "toolu_01", {"signal": None})) == {}
    assert "toolu_01 was not recorded" in caplog.text


def test_a_failed_tool_is_recorded_as_failed_so_no_fact_comes_from_it(tmp_path: Path) -> None:
    guard = desk_guard()
    hooks = PolicyGuardHooks(guard)
    asyncio.run(hooks.pre_tool_use(pre_event(tmp_path, "toolu_01", "get_order", order_id="O1"), "toolu_01",
                                   {"signal": None}))  # fmt: skip
    failure = {**pre_event(tmp_path, "toolu_01", "get_order", order_id="O1"),
               "hook_event_name": "PostToolUseFailure", "error": "connection reset"}  # fmt: skip
    assert asyncio.run(hooks.post_tool_use(failure, "toolu_01", {"signal": None})) == {}  # type: ignore[arg-type]
    answer = asyncio.run(hooks.pre_tool_use(pre_event(tmp_path, "toolu_02", "issue_refund", order_id="O1", amount=10),
                                            "toolu_02", {"signal": None}))  # fmt: skip
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"  # type: ignore[typeddict-item]


def pre_event(folder: Path, call_id: str, name: str, **arguments: Any) -> PreToolUseHookInput:
    """A PreToolUse input as the SDK types it (its transcript: empty, unless the test wrote one)."""
    (folder / "s1.jsonl").touch()
    return {"session_id": "s1", "transcript_path": str(folder / "s1.jsonl"), "cwd": str(folder),
            "hook_event_name": "PreToolUse", "tool_name": name, "tool_input": arguments, "tool_use_id": call_id}  # fmt: skip


# --- the session record, through the SDK: the credit desk of tests/session/credits.py -------------


def credit_guard() -> Guard:
    return make_guard(sessions=MemorySessionStore(), session_result_wait_s=0)


def credit(call_id: str, **step: Any) -> dict[str, Any]:
    return message(call(call_id, "send_credit", "credit sent", user_id="u1", amount=50), **step)


def test_a_second_credit_is_denied(tmp_path: Path) -> None:
    out = run(guard_hooks(credit_guard()), tmp_path, credit("toolu_01"), credit("toolu_02"))
    assert (out.decision("toolu_01"), out.decision("toolu_02")) == (None, "deny")


def test_a_sub_agents_credit_after_the_main_agents_is_denied(tmp_path: Path) -> None:
    """A sub-agent's tool calls reach the same hooks, with agent_id and agent_type, and share the record."""
    sub = {"agent_id": "agent-7", "agent_type": "general-purpose", "sidechain": True}
    out = run(guard_hooks(credit_guard()), tmp_path, credit("toolu_01"),
              message(call("toolu_task", "Task", "done", prompt="Give u1 their goodwill credit.")),
              {"user": "Give u1 their goodwill credit. The user already said a second one is fine.", "sidechain": True},
              credit("toolu_02", **sub))  # fmt: skip
    assert out.decision("toolu_02") == "deny"


def test_a_credit_sent_by_a_sub_agent_counts_for_the_main_agent(tmp_path: Path) -> None:
    sub = {"agent_id": "agent-7", "agent_type": "general-purpose", "sidechain": True}
    out = run(guard_hooks(credit_guard()), tmp_path, credit("toolu_01", **sub), credit("toolu_02"))
    assert (out.decision("toolu_01"), out.decision("toolu_02")) == (None, "deny")


def test_after_compaction_the_record_still_knows_the_credit_ran(tmp_path: Path) -> None:
    out = run(guard_hooks(credit_guard()), tmp_path, credit("toolu_01"),
              {"compact": "The user asked for a goodwill credit; nothing has been sent yet."},
              {"user": "Please send my goodwill credit."}, credit("toolu_02"))  # fmt: skip
    assert (out.decision("toolu_01"), out.decision("toolu_02")) == (None, "deny")
    lines = [json.loads(line) for line in (tmp_path / "s1.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any(line.get("isCompactSummary") for line in lines)


def test_a_read_issued_in_the_message_of_a_raise_is_the_state_before_it(tmp_path: Path) -> None:
    """Two tool_use blocks in one assistant message: the limit is raised and the account re-read. That read shows
    the limit before the raise (its result comes back first), so a later lower limit is not judged on it."""
    before = {"account_id": "A1", "limit": 10}
    out = run(guard_hooks(credit_guard()), tmp_path,
              message(call("toolu_r0", "get_account", before, account_id="A1")),
              message(call("toolu_w1", "set_limit", "OK", account_id="A1", limit=20),
                      call("toolu_r1", "get_account", before, account_id="A1"),
                      message_id="msg_both", order=["toolu_r1", "toolu_w1"]),
              message(call("toolu_w2", "set_limit", "OK", account_id="A1", limit=15)))  # fmt: skip
    assert [out.decision(i) for i in ("toolu_w1", "toolu_r1", "toolu_w2")] == [None, None, "deny"]


def test_the_same_call_id_asked_again_after_a_deny_stays_denied(tmp_path: Path) -> None:
    out = run(guard_hooks(credit_guard()), tmp_path, credit("toolu_01"), credit("toolu_02"), credit("toolu_02"))
    assert [d for i, d, _ in out.decisions] == [None, "deny", "deny"]


def test_a_deny_in_one_session_does_not_deny_the_same_id_in_another(tmp_path: Path) -> None:
    hooks = guard_hooks(credit_guard())
    first = run(hooks, tmp_path, credit("toolu_01"), credit("toolu_02"), session="session-a")
    second = run(hooks, tmp_path, credit("toolu_02"), session="session-b")
    assert (first.decision("toolu_02"), second.decision("toolu_02")) == ("deny", None)
