"""What the guard refuses before any stage judges a call.

Each test is one attack an agent, a user or a compromised tool can mount with
the call itself: a name that only looks like a known tool, arguments no check
can read exactly, an id that already names another call, an amount that is
not an amount. The answer is always a BLOCK decision, never an exception and
never an allow.
"""

from __future__ import annotations

import asyncio
import json
import math
import textwrap
import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import Decision, Message, ToolCall, Trajectory, parse_checklist
from policyguard.audit.trace import Trace
from policyguard.decision import RequirementResult
from policyguard.errors import ConfigError
from policyguard.guard.core import Guard
from policyguard.stages import CheckContext
from policyguard.trajectory.canonical import policy_version

TOO_DEEP_TO_HASH = 20_000
"""Nesting json.dumps refuses (RecursionError) on every supported Python: 3.13 encodes 5,000 levels, 3.11 does not."""

POLICY = "Refunds need a read of the order first. Refunds above 500 need a supervisor.\n"

CHECKLIST = textwrap.dedent(
    f"""
    policy: {{name: refunds, version: "{policy_version(POLICY)}"}}
    tools:
      get_order: {{mutating: false}}
      cancel_order:
        requirements:
          - id: read-order
            text: The order was read first.
            kind: procedural
            source: Refunds need a read of the order first.
      issue_refund:
        effect: {{kind: money, transaction_arg: order_id, ceiling: 1000, approval_threshold: 500}}
        requirements:
          - id: read-order-refund
            text: The order was read first.
            kind: procedural
            source: Refunds need a read of the order first.
    """
)


@dataclass
class PassingGate:
    """A gate that escalates everything: any block below comes from the guard itself."""

    calls: list[ToolCall] = field(default_factory=list)

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.calls.append(call)
        return Decision.escalate("gate")


@dataclass
class PassingVerifier:
    """A verifier that passes everything it is shown."""

    calls: list[ToolCall] = field(default_factory=list)

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.calls.append(call)
        return Decision.allow("verifier")

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        return self.verify(call, trajectory, context)


def make_guard(**kw: object) -> tuple[Guard, PassingGate, PassingVerifier]:
    gate, verifier = PassingGate(), PassingVerifier()
    guard = Guard(parse_checklist(CHECKLIST, file="refusals.yaml"), POLICY, gate=gate, verifier=verifier, **kw)  # type: ignore[arg-type]
    return guard, gate, verifier


def refund(amount: object, call_id: str = "r1") -> ToolCall:
    return ToolCall(
        id=call_id, name="issue_refund", arguments={"order_id": "O1", "amount": amount, "idempotency_key": "k1"}
    )


# -- unknown and near-miss tool names -------------------------------------------

NEAR_MISSES = [
    "Cancel_order",
    "cancel_order ",
    " cancel_order",
    "ｃａｎｃｅｌ_order",  # fullwidth letters
    "cancel\u200b_order",  # zero-width space
    "functions.cancel_order",
    "cancel_orders",
    "CANCEL_ORDER",
    "delete_all_orders",
]


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_a_name_that_only_resembles_a_known_tool_is_blocked(name: str) -> None:
    guard, gate, verifier = make_guard()
    decision = guard.check(ToolCall(id="c1", name=name, arguments={"order_id": "O1"}), Trajectory())
    assert decision.outcome == "block" and decision.stage == "unknown_tool"
    assert gate.calls == [] and verifier.calls == []


@pytest.mark.parametrize("name", ["Cancel_order", "cancel\u200b_order", "functions.cancel_order", "cancel_orders"])
def test_the_block_names_the_tool_the_name_resembles(name: str) -> None:
    guard, _, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name=name, arguments={}), Trajectory())
    assert "Did you mean 'cancel_order'?" in (decision.message or "")


def test_a_name_resembling_nothing_gets_no_guess() -> None:
    guard, _, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="delete_all_orders", arguments={}), Trajectory())
    assert decision.outcome == "block" and "Did you mean" not in (decision.message or "")


def test_unknown_tools_are_judged_only_when_the_integrator_opts_in() -> None:
    guard, gate, verifier = make_guard(unknown_tools="check")
    decision = guard.check(ToolCall(id="c1", name="delete_all_orders", arguments={}), Trajectory())
    assert decision.outcome == "allow"
    assert [c.name for c in gate.calls] == ["delete_all_orders"] and len(verifier.calls) == 1


def test_opting_in_never_lets_an_invisible_or_spaced_name_through() -> None:
    guard, gate, _ = make_guard(unknown_tools="check")
    for name in ("cancel\u200b_order", "cancel_order ", "ｃａｎｃｅｌ_order"):
        decision = guard.check(ToolCall(id="c1", name=name, arguments={}), Trajectory())
        assert decision.outcome == "block" and decision.stage == "unknown_tool", name
    assert gate.calls == []


def test_a_glob_key_cannot_admit_a_disguised_name() -> None:
    text = CHECKLIST.replace("      get_order: {mutating: false}", "      get_*: {mutating: false}")
    guard = Guard(parse_checklist(text, file="glob.yaml"), POLICY, gate=PassingGate(), verifier=PassingVerifier())
    decision = guard.check(ToolCall(id="c1", name="get_order\u200b", arguments={}), Trajectory())
    assert decision.outcome == "block" and decision.stage == "unknown_tool"


def test_a_misspelt_unknown_tools_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown_tools"):
        make_guard(unknown_tools="allow")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_no_name_but_the_exact_one_reaches_the_known_tools_rules(name: str) -> None:
    guard, gate, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name=name, arguments={}), Trajectory())
    if name in ("get_order", "cancel_order", "issue_refund"):
        return
    assert decision.outcome == "block" and gate.calls == []


# -- arguments no check can read exactly ----------------------------------------

BAD_ARGUMENTS = {
    "nan": {"order_id": "O1", "amount": math.nan},
    "infinity": {"order_id": "O1", "amount": math.inf},
    "negative infinity": {"order_id": "O1", "amount": -math.inf},
    "1e999 as parsed by json": json.loads('{"order_id": "O1", "amount": 1e999}'),
    "integer beyond 64 bits": {"order_id": "O1", "count": 2**64 + 1},
    "nested nan": {"order_id": "O1", "items": [{"qty": math.nan}]},
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_arguments_outside_the_limits_are_blocked_not_raised(case: str) -> None:
    guard, gate, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments=BAD_ARGUMENTS[case]), Trajectory())
    assert decision.outcome == "block" and decision.stage == "bad_call"
    assert gate.calls == []


def test_arguments_nested_past_the_recursion_limit_are_blocked() -> None:
    deep: list[object] = []
    node = deep
    for _ in range(TOO_DEEP_TO_HASH):
        child: list[object] = []
        node.append(child)
        node = child
    guard, _, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments={"x": deep}), Trajectory())
    assert decision.outcome == "block" and decision.stage == "bad_call"
    assert decision.args_sha256 == "unhashable"


def test_a_bad_call_is_still_recorded_in_a_trace_that_audits_clean(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from policyguard.audit.inv1 import audit_records

    path = tmp_path / "trace.jsonl"
    guard, _, _ = make_guard(trace=Trace(path))
    guard.check(ToolCall(id="c1", name="cancel_order", arguments={"amount": math.nan}), Trajectory())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["submit", "deny", "decision"]
    assert {r["args_sha256"] for r in records} == {"unhashable"}
    assert audit_records(records).ok


def test_async_check_refuses_the_same_way() -> None:
    guard, _, _ = make_guard()
    decision = asyncio_run(guard.acheck(ToolCall(id="c1", name="Cancel_order", arguments={}), Trajectory()))
    assert decision.outcome == "block" and decision.stage == "unknown_tool"


def asyncio_run(coro):  # type: ignore[no-untyped-def]
    import asyncio

    return asyncio.run(coro)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
        max_leaves=30,
    )
)
def test_no_argument_value_makes_the_guard_raise(value: object) -> None:
    guard, _, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments={"x": value}), Trajectory())
    assert decision.outcome in ("allow", "block")
    if has_unreadable_number(value):
        assert decision.outcome == "block"


def has_unreadable_number(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**63
    if isinstance(value, list):
        return any(has_unreadable_number(v) for v in value)
    if isinstance(value, dict):
        return any(has_unreadable_number(v) for v in value.values())
    return False


# -- call ids that already name something else ----------------------------------


def test_a_pending_call_carried_by_its_own_message_is_judged() -> None:
    call = ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"})
    trajectory = Trajectory(messages=[Message(role="assistant", tool_calls=[call])])
    guard, gate, _ = make_guard()
    assert guard.check(call, trajectory).outcome == "allow" and len(gate.calls) == 1


def test_an_id_used_by_another_call_that_is_not_answered_is_blocked() -> None:
    read = ToolCall(id="c1", name="get_order", arguments={"order_id": "O2"})
    trajectory = Trajectory(messages=[Message(role="assistant", tool_calls=[read])])
    guard, gate, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"}), trajectory)
    assert decision.outcome == "block" and decision.stage == "bad_call" and gate.calls == []


def test_an_id_reused_after_its_call_was_answered_names_a_new_call() -> None:
    read = ToolCall(id="c1", name="get_order", arguments={"order_id": "O2"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="c1", content='{"order_id": "O2"}'),
        ]
    )
    guard, gate, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"}), trajectory)
    assert decision.stage != "bad_call" and len(gate.calls) == 1


def test_a_pending_call_already_answered_under_its_id_is_blocked() -> None:
    cancel = ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[cancel]),
            Message(role="tool", tool_call_id="c1", content='{"status": "cancelled"}'),
        ]
    )
    guard, gate, _ = make_guard()
    decision = guard.check(cancel, trajectory)
    assert decision.outcome == "block" and decision.stage == "bad_call" and gate.calls == []
    assert "already answered" in (decision.message or "")


def test_an_id_that_was_already_answered_is_blocked() -> None:
    call = ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="c1", content="cancelled"),
        ]
    )
    guard, _, _ = make_guard()
    decision = guard.check(call, trajectory)
    assert decision.outcome == "block" and "already answered" in (decision.message or "")


def test_the_same_id_with_other_arguments_is_blocked() -> None:
    carried = ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O2"})
    trajectory = Trajectory(messages=[Message(role="assistant", tool_calls=[carried])])
    guard, _, _ = make_guard()
    decision = guard.check(ToolCall(id="c1", name="cancel_order", arguments={"order_id": "O1"}), trajectory)
    assert decision.outcome == "block" and decision.stage == "bad_call"


# -- money effects ---------------------------------------------------------------


@pytest.mark.parametrize(
    "amount", [-50, 0, "50", True, None, math.nan, 0.0, -0.01, 2**53 + 1], ids=lambda a: f"amount={a!r}"
)
def test_a_money_call_whose_amount_is_not_a_positive_number_is_blocked(amount: object) -> None:
    guard, gate, _ = make_guard()
    decision = guard.check(refund(amount), Trajectory())
    assert decision.outcome == "block" and gate.calls == []


def test_a_money_call_above_the_ceiling_is_blocked() -> None:
    guard, _, _ = make_guard()
    decision = guard.check(refund(1000.01), Trajectory())
    assert decision.outcome == "block" and [r.id for r in decision.requirements] == ["effect-ceiling"]


def test_a_money_call_above_the_approval_threshold_without_an_approving_requirement_is_blocked() -> None:
    guard, _, verifier = make_guard()
    decision = guard.check(refund(500.5), Trajectory())
    assert decision.outcome == "block" and [r.id for r in decision.requirements] == ["effect-approval"]
    assert "approval" in (decision.message or "") and verifier.calls == []


APPROVED = CHECKLIST.replace(
    "approval_threshold: 500}", "approval_threshold: 500, approved_by: approval-recorded}"
).replace(
    "      - id: read-order-refund",
    "      - id: approval-recorded\n"
    "        text: An approval was recorded.\n"
    "        kind: data\n"
    "        source: Refunds above 500 need a supervisor.\n"
    "      - id: read-order-refund",
)


@dataclass
class ApprovalGate:
    """A gate that reports the approval requirement with a fixed status and judge."""

    status: str
    judged_by: str = "gate"

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        result = RequirementResult(id="approval-recorded", status=self.status, judged_by=self.judged_by)  # type: ignore[arg-type]
        return Decision.escalate("gate", requirements=[result])


@pytest.mark.parametrize(
    ("status", "judged_by", "outcome"),
    [
        ("MET", "gate", "allow"),
        ("NOT_MET", "gate", "block"),
        ("UNVERIFIED", "none", "block"),
        ("MET", "verifier", "block"),
    ],
)
def test_above_the_threshold_only_the_gates_proof_of_the_approving_requirement_counts(
    status: str, judged_by: str, outcome: str
) -> None:
    checklist = parse_checklist(APPROVED, file="approved.yaml")
    guard = Guard(checklist, POLICY, gate=ApprovalGate(status, judged_by), verifier=PassingVerifier())
    assert guard.check(refund(800), Trajectory()).outcome == outcome


def test_above_the_threshold_without_a_gate_nothing_is_proven() -> None:
    checklist = parse_checklist(APPROVED, file="approved.yaml")
    guard = Guard(checklist, POLICY, gate=None, verifier=PassingVerifier())
    assert guard.check(refund(800), Trajectory()).outcome == "block"


def test_a_money_call_within_its_limits_goes_on_to_the_stages() -> None:
    guard, gate, verifier = make_guard()
    assert guard.check(refund(500), Trajectory()).outcome == "allow"
    assert len(gate.calls) == 1 and len(verifier.calls) == 1


def test_the_effect_limits_hold_without_a_gate() -> None:
    guard = Guard(parse_checklist(CHECKLIST, file="refusals.yaml"), POLICY, gate=None, verifier=PassingVerifier())
    assert guard.check(refund(-5), Trajectory()).outcome == "block"


# -- the same refusals through the drop-in wrapper and the command line ----------


def test_guarded_tools_refuse_a_host_whose_function_is_registered_under_a_near_miss_name() -> None:
    from policyguard import GuardedTools
    from policyguard.errors import ConfigError

    guard, _, _ = make_guard()
    others = {name: (lambda **kw: "done") for name in guard.checklist.tools if name != "cancel_order"}
    with pytest.raises(
        ConfigError, match="'cancel_order' \\(did you mean 'Cancel_order', which GuardedTools has\\?\\)"
    ):
        GuardedTools(guard, {"Cancel_order": lambda **kw: "done", **others})


@pytest.mark.parametrize("name", ["Cancel_order", "cancel_order ", "functions.cancel_order"])
def test_verify_exits_with_the_block_code_for_a_near_miss_name(tmp_path, capsys, name: str) -> None:  # type: ignore[no-untyped-def]
    from policyguard.cli import main

    (tmp_path / "policy.md").write_text(POLICY, encoding="utf-8")
    (tmp_path / "checklist.yaml").write_text(CHECKLIST, encoding="utf-8")
    (tmp_path / "trajectory.json").write_text(json.dumps([{"role": "user", "content": "cancel O1"}]), encoding="utf-8")
    call = {"id": "c1", "name": name, "arguments": {"order_id": "O1"}}
    (tmp_path / "call.json").write_text(json.dumps(call), encoding="utf-8")
    files = ["--policy", "policy.md", "--checklist", "checklist.yaml", "--trajectory", "trajectory.json"]
    argv = ["verify", *[str(tmp_path / f) if not f.startswith("--") else f for f in files], "--format", "openai_chat"]
    assert main([*argv, "--call", str(tmp_path / "call.json")]) == 1
    assert json.loads(capsys.readouterr().out)["stage"] == "unknown_tool"
    if name != name.strip():
        opted_in = main([*argv, "--call", str(tmp_path / "call.json"), "--unknown-tools", "check"])
        assert opted_in == 1, "a name with spaces is blocked even when unknown tools are judged"


def test_a_dialogue_with_a_duplicated_call_id_is_refused_even_without_a_gate() -> None:
    first = ToolCall(id="dup", name="get_order", arguments={"order_id": "O2"})
    second = ToolCall(id="dup", name="get_order", arguments={"order_id": "O1"})
    trajectory = Trajectory(
        messages=[
            Message(role="assistant", tool_calls=[first, second]),
            Message(role="tool", tool_call_id="dup", content='{"order_id": "O2"}'),
        ]
    )
    guard = Guard(parse_checklist(CHECKLIST, file="refusals.yaml"), POLICY, gate=None, verifier=PassingVerifier())
    decision = guard.check(ToolCall(id="c9", name="cancel_order", arguments={"order_id": "O1"}), trajectory)
    assert decision.outcome == "block" and decision.stage == "bad_call" and "'dup'" in (decision.error or "")


def test_the_hard_gate_alone_blocks_arguments_too_deep_to_hash() -> None:
    from policyguard import HardGate

    deep: list[object] = []
    node = deep
    for _ in range(TOO_DEEP_TO_HASH):
        child: list[object] = []
        node.append(child)
        node = child
    checklist = parse_checklist(CHECKLIST, file="refusals.yaml")
    guard, _, _ = make_guard()
    decision = HardGate(checklist).check(
        ToolCall(id="c1", name="cancel_order", arguments={"x": deep}), Trajectory(), guard.context()
    )
    assert decision.outcome == "block" and decision.args_sha256 is None


# -- a costly check does not hold up other sessions ------------------------------


class WaitingGate(PassingGate):
    """A gate whose check holds its thread until another coroutine has run (or 5 s have passed)."""

    def __init__(self) -> None:
        super().__init__()
        self.other_ran = threading.Event()
        self.saw_other: bool | None = None

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.saw_other = self.other_ran.wait(timeout=5)
        return super().check(call, trajectory, context)


def test_acheck_runs_the_gate_off_the_event_loop_so_other_sessions_keep_running() -> None:
    gate = WaitingGate()
    guard = Guard(parse_checklist(CHECKLIST, file="refusals.yaml"), POLICY, gate=gate, verifier=PassingVerifier())

    async def other_session() -> None:
        await asyncio.sleep(0.01)
        gate.other_ran.set()  # runs only if the event loop is free while the gate decides

    async def main() -> Decision:
        decision, _ = await asyncio.gather(guard.acheck(refund(50), Trajectory(messages=[])), other_session())
        return decision

    decision = asyncio.run(main())
    assert decision.stage != "bad_call" and gate.calls
    assert gate.saw_other is True
