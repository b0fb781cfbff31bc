"""Every way a well-formed verifier answer becomes a decision."""

from __future__ import annotations

import json
from collections.abc import Callable

from policyguard import ScriptedModel, ToolCall, Trajectory
from policyguard.stages import CheckContext, Verifier
from policyguard.verifier.llm import DEFAULT_REMEDIATION, LLMVerifier

ALL_MET = {"CR-1": "MET", "CR-2": "MET", "G-CONFIRM": "MET"}


def test_llm_verifier_implements_the_verifier_protocol() -> None:
    assert isinstance(LLMVerifier(ScriptedModel()), Verifier)


def test_clean_pass_allows_and_records_every_requirement(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    model = ScriptedModel([answer(ALL_MET, "PASS")])
    decision = LLMVerifier(model).verify(cancel_call, trajectory, context)
    model.assert_complete()
    assert decision.outcome == "allow"
    assert decision.stage == "verifier"
    assert decision.verdict == "PASS"
    assert [r.id for r in decision.requirements] == ["CR-1", "CR-2", "G-CONFIRM"]
    assert all(r.status == "MET" and r.judged_by == "verifier" for r in decision.requirements)
    assert decision.requirements[0].evidence == "3 and 5 show it (CR-1) (messages 3, 5)"
    assert decision.call_id == "call_9"
    assert decision.tool == "cancel_reservation"
    assert decision.args_sha256 == cancel_call.args_sha256
    assert decision.inconsistency is None and decision.error is None
    assert decision.usage is not None and decision.usage.calls == 1


def test_not_applicable_does_not_block(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    statuses = {**ALL_MET, "CR-2": "NOT_APPLICABLE"}
    decision = LLMVerifier(ScriptedModel([answer(statuses, "PASS")])).verify(cancel_call, trajectory, context)
    assert decision.outcome == "allow"


def test_not_met_blocks_with_the_models_remediation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    remediation = "Ask the user to confirm the cancellation details explicitly before cancelling."
    statuses = {**ALL_MET, "G-CONFIRM": "NOT_MET"}
    model = ScriptedModel([answer(statuses, "BLOCK", remediation)])
    decision = LLMVerifier(model).verify(cancel_call, trajectory, context)
    assert decision.outcome == "block"
    assert decision.stage == "verifier"
    assert decision.verdict == "BLOCK"
    assert decision.message == remediation
    assert {r.id: r.status for r in decision.requirements}["G-CONFIRM"] == "NOT_MET"
    assert decision.inconsistency is None


def test_pass_with_a_not_met_item_blocks_and_records_the_inconsistency(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    statuses = {**ALL_MET, "CR-2": "NOT_MET"}
    decision = LLMVerifier(ScriptedModel([answer(statuses, "PASS", "Refuse.")])).verify(
        cancel_call, trajectory, context
    )
    assert decision.outcome == "block"
    assert decision.stage == "verifier"
    assert decision.inconsistency is not None and "CR-2" in decision.inconsistency
    assert decision.message == "Refuse."


def test_block_with_everything_met_still_blocks_and_records_it(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    decision = LLMVerifier(ScriptedModel([answer(ALL_MET, "BLOCK", "Check again.")])).verify(
        cancel_call, trajectory, context
    )
    assert decision.outcome == "block"
    assert decision.inconsistency is not None and "no requirement is NOT_MET" in decision.inconsistency


def test_empty_remediation_on_block_gets_the_safe_default(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    statuses = {**ALL_MET, "CR-1": "NOT_MET"}
    decision = LLMVerifier(ScriptedModel([answer(statuses, "BLOCK", "   ")])).verify(cancel_call, trajectory, context)
    assert decision.outcome == "block"
    assert decision.message == DEFAULT_REMEDIATION


def test_long_remediation_is_passed_on_unchanged(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    long = "Read the reservation. Ask the user. Confirm the details. Then try again. Be polite."
    statuses = {**ALL_MET, "CR-1": "NOT_MET"}
    decision = LLMVerifier(ScriptedModel([answer(statuses, "BLOCK", long)])).verify(cancel_call, trajectory, context)
    assert decision.stage == "verifier"
    assert decision.message == long


def test_unknown_ids_are_recorded_but_do_not_count(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    decision = LLMVerifier(ScriptedModel([answer({**ALL_MET, "MADE-UP": "MET"}, "PASS")])).verify(
        cancel_call, trajectory, context
    )
    assert decision.outcome == "allow"
    assert [r.id for r in decision.requirements] == ["CR-1", "CR-2", "G-CONFIRM", "MADE-UP"]
    assert decision.inconsistency is not None and "MADE-UP" in decision.inconsistency


def test_unknown_id_judged_not_met_still_blocks(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    decision = LLMVerifier(ScriptedModel([answer({**ALL_MET, "MADE-UP": "NOT_MET"}, "PASS")])).verify(
        cancel_call, trajectory, context
    )
    assert decision.outcome == "block"


def test_a_repeated_id_keeps_its_most_severe_status(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    items = [{"id": rid, "status": "MET", "evidence": "[3]"} for rid in ALL_MET]
    items.append({"id": "CR-1", "status": "NOT_MET", "evidence": "no lookup"})
    text = json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})
    decision = LLMVerifier(ScriptedModel([text])).verify(cancel_call, trajectory, context)
    assert decision.outcome == "block"
    assert {r.id: r.status for r in decision.requirements}["CR-1"] == "NOT_MET"
    assert decision.inconsistency is not None and "more than once" in decision.inconsistency


def test_glob_tool_is_judged_on_its_glob_requirements(
    trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    call = ToolCall(id="call_u", name="update_reservation_flights", arguments={"reservation_id": "ZFA04Y"})
    model = ScriptedModel([answer({"UP-1": "MET", "G-CONFIRM": "MET"}, "PASS")])
    assert LLMVerifier(model).verify(call, trajectory, context).outcome == "allow"


def test_verdict_in_prose_and_code_fences_is_parsed_last_object_wins(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    draft = answer({**ALL_MET, "G-CONFIRM": "NOT_MET"}, "BLOCK", "draft")
    final = answer(ALL_MET, "PASS")
    text = f"First thoughts:\n```json\n{draft}\n```\nOn reflection the user did confirm at [5].\n```json\n{final}\n```"
    decision = LLMVerifier(ScriptedModel([text])).verify(cancel_call, trajectory, context)
    assert decision.outcome == "allow"


def test_usage_reports_tokens_and_latency(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext, answer: Callable[..., str]
) -> None:
    decision = LLMVerifier(ScriptedModel([answer(ALL_MET, "PASS")])).verify(cancel_call, trajectory, context)
    assert decision.usage is not None
    assert decision.usage.input_tokens > 0 and decision.usage.output_tokens > 0
    assert decision.usage.latency_s > 0
