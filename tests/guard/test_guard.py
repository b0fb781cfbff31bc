"""The guard's contract: which calls reach which stage, and what each outcome means."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from policyguard import ChecklistError, Decision, Message, ToolCall, Trajectory
from policyguard.decision import RequirementResult
from policyguard.guard.core import Guard, after_block
from policyguard.stages import CheckContext


@dataclass
class FakeGate:
    """A gate double: returns a fixed decision kind and records calls."""

    kind: str = "escalate"
    calls: list[ToolCall] = field(default_factory=list)

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.calls.append(call)
        if self.kind == "block":
            return Decision.block(
                "gate",
                "Read the order first.",
                requirements=[RequirementResult(id="read-order", status="NOT_MET", judged_by="gate")],
            )
        if self.kind == "halt":
            return Decision.halt("gate", "kill switch")
        if self.kind == "raise":
            raise RuntimeError("gate bug")
        return Decision.escalate(
            "gate",
            requirements=[
                RequirementResult(id="read-order", status="MET", judged_by="gate"),
                RequirementResult(id="user-confirmed", status="UNVERIFIED", judged_by="none"),
            ],
        )


@dataclass
class FakeVerifier:
    """A verifier double: PASS, BLOCK or raise; records calls."""

    kind: str = "pass"
    calls: list[ToolCall] = field(default_factory=list)

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.calls.append(call)
        if self.kind == "raise":
            raise RuntimeError("verifier bug")
        if self.kind == "block":
            return Decision.block(
                "verifier",
                "Ask the user to confirm first.",
                requirements=[
                    RequirementResult(id="read-order", status="MET"),
                    RequirementResult(id="user-confirmed", status="NOT_MET"),
                ],
            )
        return Decision.allow(
            "verifier",
            requirements=[
                RequirementResult(id="read-order", status="MET"),
                RequirementResult(id="user-confirmed", status="MET"),
            ],
        )

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        return self.verify(call, trajectory, context)


REFUND = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50})
READ = ToolCall(id="c0", name="get_order", arguments={"order_id": "O1"})
EMPTY = Trajectory()


def make(checklist, policy_text, gate="escalate", verifier="pass", **kw):  # type: ignore[no-untyped-def]
    g = FakeGate(gate) if gate else None
    v = FakeVerifier(verifier) if verifier else None
    return Guard(checklist, policy_text, gate=g, verifier=v, **kw), g, v


def test_read_only_call_is_allowed_without_any_stage(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, gate, verifier = make(checklist, policy_text)
    decision = guard.check(READ, EMPTY)
    assert decision.outcome == "allow" and decision.stage == "read_only"
    assert gate.calls == [] and verifier.calls == []
    assert guard.counters.read_only == 1 and guard.counters.attempted_mutating == 0


def test_unknown_tool_is_blocked_before_any_stage(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, gate, verifier = make(checklist, policy_text)
    decision = guard.check(ToolCall(id="c9", name="delete_everything", arguments={}), EMPTY)
    assert decision.outcome == "block" and decision.stage == "unknown_tool"
    assert gate.calls == [] and verifier.calls == []
    assert guard.counters.attempted_mutating == 1 and guard.counters.blocked == 1


def test_unknown_tool_opted_in_is_judged_as_mutating(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, gate, verifier = make(checklist, policy_text, unknown_tools="check")
    call = ToolCall(id="c9", name="delete_everything", arguments={})
    decision = guard.check(call, EMPTY)
    assert [c.name for c in gate.calls] == ["delete_everything"]
    assert [c.name for c in verifier.calls] == ["delete_everything"]
    assert decision.outcome == "allow" and guard.counters.attempted_mutating == 1


def test_gate_block_costs_no_model_call(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, verifier = make(checklist, policy_text, gate="block")
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "block" and decision.stage == "gate"
    assert decision.message == "Read the order first."
    assert verifier.calls == []


def test_gate_escalates_then_verifier_passes_and_results_merge(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text)
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "allow" and decision.verdict == "PASS"
    judged = {r.id: (r.status, r.judged_by) for r in decision.requirements}
    assert judged == {"read-order": ("MET", "gate"), "user-confirmed": ("MET", "verifier")}
    assert decision.call_id == "c1" and decision.tool == "issue_refund"
    assert decision.args_sha256 == REFUND.args_sha256


def test_verifier_block_blocks(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block")
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "block" and decision.message == "Ask the user to confirm first."
    assert guard.counters.blocked == 1 and guard.counters.passed == 0


def test_escalation_without_verifier_blocks_by_default(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier=None)
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "block" and decision.stage == "guard"


def test_gate_only_mode_allows_and_lists_unverified(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier=None, allow_unverified=True)
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "allow"
    assert decision.unverified == ["user-confirmed"]


@pytest.mark.parametrize("failing", ["gate", "verifier"])
def test_a_stage_that_raises_blocks(checklist, policy_text, failing):  # type: ignore[no-untyped-def]
    guard, _, _ = make(
        checklist,
        policy_text,
        gate="raise" if failing == "gate" else "escalate",
        verifier="raise" if failing == "verifier" else "pass",
    )
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "block"
    assert decision.stage == f"{failing}_error"
    assert "bug" in (decision.error or "")
    assert guard.counters.errors == 1


def test_advisory_mode_records_block_but_allows(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block", strict=False)
    decision = guard.check(REFUND, EMPTY)
    assert decision.outcome == "allow" and decision.verdict == "BLOCK"
    snap = guard.counters
    assert snap.blocked == 1 and snap.advisory_blocks == 1


def test_halt_is_never_softened_by_advisory_mode(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, gate="halt", strict=False)
    assert guard.check(REFUND, EMPTY).outcome == "halt"


def test_checklist_for_another_policy_version_is_refused(checklist):  # type: ignore[no-untyped-def]
    with pytest.raises(ChecklistError, match="policy version mismatch"):
        Guard(checklist, "a different policy text")


def test_every_decision_lands_in_the_trace(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block")
    guard.check(REFUND, EMPTY)
    events = [e["event"] for e in guard.trace.events]
    assert events == ["submit", "deny", "decision"]
    record = guard.trace.events[-1]
    assert record["call_id"] == "c1" and record["tool"] == "issue_refund"
    assert record["args_sha256"] == REFUND.args_sha256
    assert record["policy_version"] == checklist.policy.version
    assert record["checklist_version"] == checklist.version
    assert record["verdict"] == "BLOCK" and record["reached_executor"] is False
    assert {r["id"] for r in record["requirements"]} == {"read-order", "user-confirmed"}
    assert record["remediation"] == "Ask the user to confirm first."


def test_allow_event_carries_policy_version_and_expiry(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text)
    guard.check(REFUND, EMPTY)
    allow = next(e for e in guard.trace.events if e["event"] == "allow")
    assert allow["policy_version"] == checklist.policy.version
    assert allow["expires_at"] > allow["ts"]


def test_concurrent_checks_are_counted_exactly(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text)
    calls = [ToolCall(id=f"c{i}", name="issue_refund", arguments={"amount": i}) for i in range(200)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        decisions = list(pool.map(lambda c: guard.check(c, EMPTY), calls))
    assert all(d.outcome == "allow" for d in decisions)
    assert guard.counters.attempted_mutating == 200 and guard.counters.passed == 200
    clocks = [e["t"] for e in guard.trace.events]
    assert sorted(clocks) == list(range(1, len(clocks) + 1))


def test_async_check_matches_sync(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block")
    decision = asyncio.run(guard.acheck(REFUND, EMPTY))
    assert decision.outcome == "block" and decision.stage == "verifier"


def test_blocked_call_leaves_the_environment_view_and_remediation_takes_its_place(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block")
    trajectory = Trajectory(
        messages=[
            Message(role="user", content="refund me"),
            Message(role="assistant", content="On it.", tool_calls=[REFUND]),
        ]
    )
    decision = guard.check(REFUND, trajectory)
    agent, environment = after_block(trajectory, REFUND, decision)
    assert all(REFUND.id not in [c.id for c in m.tool_calls] for m in environment.messages)
    assert environment.messages[-1].content == "On it."
    last = agent.messages[-1]
    assert last.role == "tool" and last.tool_call_id == "c1" and last.is_error
    assert last.content == "Ask the user to confirm first."


def test_arguments_mutated_after_a_decision_change_the_hash() -> None:
    call = ToolCall(id="c1", name="issue_refund", arguments={"order_id": "O1", "amount": 50})
    before = call.args_sha256
    call.arguments["amount"] = 51  # the dict inside a frozen model is still mutable
    assert call.args_sha256 != before


# ---------------------------------------------------------------- files: every error is a PolicyGuardError naming the file

FILE_POLICY = "Refunds need a read of the order first.\n"


def _files(tmp_path):  # type: ignore[no-untyped-def]
    from policyguard.trajectory.canonical import policy_version

    policy = tmp_path / "policy.md"
    policy.write_text(FILE_POLICY)
    checklist = tmp_path / "checklist.yaml"
    checklist.write_text(
        f'policy: {{name: refunds, version: "{policy_version(FILE_POLICY)}"}}\n'
        "tools:\n  get_order: {mutating: false}\n  issue_refund:\n    requirements:\n"
        "      - {id: read-order, text: The order was read first., kind: procedural,"
        " source: Refunds need a read of the order first.}\n"
    )
    return policy, checklist


@pytest.mark.parametrize("which", ["policy", "checklist", "model", "trace"])
def test_from_files_names_a_missing_file_in_a_policyguard_error(tmp_path, which):  # type: ignore[no-untyped-def]
    """Guard.from_files once raised FileNotFoundError for a missing policy, though errors derive from PolicyGuardError."""
    from policyguard import PolicyGuardError

    policy, checklist = _files(tmp_path)
    missing = tmp_path / "nowhere" / f"missing-{which}"
    kwargs = {"policy": policy, "checklist": checklist}
    if which in ("policy", "checklist"):
        kwargs[which] = missing
    elif which == "model":
        kwargs["model"] = f"scripted:{missing}"
    else:
        (tmp_path / "nowhere").write_text("a file where the trace's directory should be")
        kwargs["trace_path"] = missing
    with pytest.raises(PolicyGuardError, match="missing-" + which):
        Guard.from_files(**kwargs)  # type: ignore[arg-type]


def test_from_files_names_the_checklist_and_policy_on_a_version_mismatch(tmp_path):  # type: ignore[no-untyped-def]
    policy, checklist = _files(tmp_path)
    policy.write_text(FILE_POLICY + "Refunds are free.\n")
    with pytest.raises(ChecklistError) as caught:
        Guard.from_files(policy=policy, checklist=checklist)
    assert caught.value.file == str(checklist) and str(policy) in str(caught.value)
    assert "<checklist>" not in str(caught.value)


def test_a_checklist_from_a_file_pinned_to_another_policy_names_the_file_and_line(tmp_path):  # type: ignore[no-untyped-def]
    """Once: a guard built from a loaded checklist (bench replay, serve) said `<checklist>: policy.version: ...`."""
    from policyguard.checklist.schema import load_checklist

    _, checklist = _files(tmp_path)
    with pytest.raises(ChecklistError) as caught:
        Guard(load_checklist(checklist), "another policy text\n")
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(checklist), 1, "policy.version")
    assert str(caught.value).startswith(f"{checklist}:1: policy.version: policy version mismatch")


# ---------------------------------------------------------------- inputs: plain provider shapes, or a TypeError

CHAT = [
    {"role": "user", "content": "Refund O1 please."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O1"}'}}]},
    {"role": "tool", "tool_call_id": "c0", "content": '{"order_id": "O1", "captured": 80}'},
]  # fmt: skip
ANTHROPIC = [
    {"role": "user", "content": "Refund O1 please."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "c0", "name": "get_order", "input": {"order_id": "O1"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c0", "content": '{"order_id": "O1"}'}]},
]  # fmt: skip
RESPONSES = [
    {"role": "user", "content": "Refund O1 please."},
    {"type": "function_call", "call_id": "c0", "name": "get_order", "arguments": '{"order_id": "O1"}'},
    {"type": "function_call_output", "call_id": "c0", "output": '{"order_id": "O1"}'},
]


@pytest.mark.parametrize("messages", [CHAT, ANTHROPIC, RESPONSES], ids=["chat", "anthropic", "responses"])
def test_a_plain_provider_message_list_is_judged_like_its_trajectory(checklist, policy_text, messages):  # type: ignore[no-untyped-def]
    """A list of dicts once crashed the gate into a generic gate_error BLOCK while read-only calls passed."""
    from policyguard.trajectory.formats import to_trajectory

    plain, _, verifier = make(checklist, policy_text, gate="escalate", verifier="pass")
    wrapped, _, _ = make(checklist, policy_text, gate="escalate", verifier="pass")
    decision = plain.check(REFUND, messages)
    assert decision.outcome == "allow" and decision.stage == "verifier"
    assert verifier is not None and len(verifier.calls) == 1
    same = wrapped.check(REFUND, to_trajectory(messages))
    assert (decision.outcome, decision.stage, decision.requirements) == (same.outcome, same.stage, same.requirements)
    assert asyncio.run(plain.acheck(REFUND, messages)).stage == "verifier"


def test_a_real_gate_reads_facts_from_a_plain_chat_list(checklist, policy_text):  # type: ignore[no-untyped-def]
    from policyguard.gate.hardgate import HardGate

    guard = Guard(checklist, policy_text, gate=HardGate(checklist), verifier=FakeVerifier("pass"))
    assert guard.check(REFUND, CHAT).stage != "gate_error"


@pytest.mark.parametrize(
    "call",
    [
        {"id": "c1", "type": "function", "function": {"name": "issue_refund", "arguments": '{"order_id": "O1", "amount": 50}'}},
        {"type": "tool_use", "id": "c1", "name": "issue_refund", "input": {"order_id": "O1", "amount": 50}},
        {"type": "function_call", "call_id": "c1", "name": "issue_refund", "arguments": '{"order_id": "O1", "amount": 50}'},
        {"id": "c1", "name": "issue_refund", "arguments": {"order_id": "O1", "amount": 50}},
    ],
    ids=["chat", "anthropic", "responses", "own shape"],
)  # fmt: skip
def test_a_call_given_as_a_provider_dict_is_read(checklist, policy_text, call):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text)
    decision = guard.check(call, CHAT)
    assert decision.allowed and decision.tool == "issue_refund" and decision.args_sha256 == REFUND.args_sha256


@pytest.mark.parametrize(
    ("call", "trajectory", "hint"),
    [
        (REFUND, {"messages": CHAT}, "trajectory is a dict"),
        (REFUND, "user: refund O1", "trajectory is a str"),
        (REFUND, None, "trajectory is a NoneType"),
        ("issue_refund", EMPTY, "call is a str"),
        ({"tool": "issue_refund"}, EMPTY, "is not a tool call"),
    ],
)
def test_a_wrong_input_type_raises_a_type_error_naming_what_to_pass(checklist, policy_text, call, trajectory, hint):  # type: ignore[no-untyped-def]
    guard, gate, _ = make(checklist, policy_text)
    with pytest.raises(TypeError, match=hint) as caught:
        guard.check(call, trajectory)
    assert "pass a policyguard." in str(caught.value)
    with pytest.raises(TypeError, match=hint):
        asyncio.run(guard.acheck(call, trajectory))
    assert gate is not None and gate.calls == []


def test_an_unreadable_message_list_raises_a_format_error_not_a_block(checklist, policy_text):  # type: ignore[no-untyped-def]
    from policyguard import FormatError

    guard, _, _ = make(checklist, policy_text)
    with pytest.raises(FormatError):
        guard.check(REFUND, [{"role": "wizard", "content": "?"}])


# ---------------------------------------------------------------- weakened fail-closed is said in the Decision


def test_advisory_mode_allows_a_failed_verifier_and_says_so(checklist, policy_text):  # type: ignore[no-untyped-def]
    """Advisory mode never enforces, so a verifier failure goes ahead too: loudly, in the Decision."""
    guard, _, _ = make(checklist, policy_text, verifier="raise", strict=False)
    decision = guard.check(REFUND, EMPTY)
    assert decision.allowed and decision.stage == "verifier_error" and decision.verdict == "BLOCK"
    [warning] = decision.warnings
    assert "advisory" in warning and "verifier_error" in warning and "nothing judged it" in warning
    [event] = [e for e in guard.trace.events if e["event"] == "decision"]
    assert event["warnings"] == decision.warnings and event["advisory"] is True


def test_advisory_mode_says_it_let_a_block_through(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, verifier="block", strict=False)
    decision = guard.check(REFUND, EMPTY)
    assert decision.allowed and decision.warnings and "advisory" in decision.warnings[0]


def test_no_gate_and_no_verifier_allows_with_a_warning(checklist, policy_text):  # type: ignore[no-untyped-def]
    guard, _, _ = make(checklist, policy_text, gate=None, verifier=None, allow_unverified=True)
    decision = guard.check(REFUND, EMPTY)
    assert decision.allowed and decision.warnings == [
        "no gate and no verifier (use_gate=False, model none): this mutating call was allowed unchecked"
    ]
    assert guard.check(READ, EMPTY).warnings == []


def test_a_strict_guard_with_its_stages_warns_about_nothing(checklist, policy_text):  # type: ignore[no-untyped-def]
    for verifier in ("pass", "block", "raise"):
        guard, _, _ = make(checklist, policy_text, verifier=verifier)
        assert guard.check(REFUND, EMPTY).warnings == []
