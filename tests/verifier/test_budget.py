"""A dialogue longer than the verifier's prompt budget: what is kept, what is elided, and when it blocks."""

from __future__ import annotations

import json
import time

import pytest

from policyguard import ConfigError, Message, ScriptedModel, ToolCall, Trajectory
from policyguard.stages import CheckContext
from policyguard.verifier.dialogue import estimate_tokens, parse_conversation
from policyguard.verifier.llm import DEFAULT_MAX_PROMPT_TOKENS, LLMVerifier

CANCEL = ToolCall(id="pending", name="cancel_reservation", arguments={"reservation_id": "ZFA04Y"})
RESERVATION = {"reservation_id": "ZFA04Y", "cabin": "business", "created_at": "2024-05-14", "notes": "n" * 200}


def long_dialogue(rounds: int, *, reread: bool = False) -> Trajectory:
    """A lookup of the reservation first, ``rounds`` x 4 messages of chatter and flight-status reads, then the
    agent's summary, the user's yes and the pending cancel (``rounds * 4 + 7`` messages)."""
    lookup = ToolCall(id="r0", name="get_reservation_details", arguments={"reservation_id": "ZFA04Y"})
    messages = [
        Message(role="user", content="Please cancel ZFA04Y."),
        Message(role="assistant", tool_calls=[lookup]),
        Message(role="tool", tool_call_id="r0", content=json.dumps(RESERVATION)),
    ]
    for i in range(rounds):
        name = "get_reservation_details" if reread and i == rounds // 2 else "get_flight_status"
        read = ToolCall(id=f"s{i}", name=name, arguments={"reservation_id": "ZFA04Y"})
        result = {**RESERVATION, "cabin": "economy"} if name == "get_reservation_details" else {"status": "on time"}
        messages += [
            Message(role="user", content=f"While you are at it, what about flight {i}? " + "blah " * 20),
            Message(role="assistant", content="Let me check.", tool_calls=[read]),
            Message(role="tool", tool_call_id=read.id, content=json.dumps(result)),
            Message(role="assistant", content=f"Flight {i} is on time."),
        ]
    messages += [
        Message(role="assistant", content="Cancel ZFA04Y (business), refund to the original payment. Proceed?"),
        Message(role="user", content="yes"),
        Message(role="assistant", tool_calls=[CANCEL]),
    ]
    return Trajectory(messages=messages)


def shown(verifier: LLMVerifier, trajectory: Trajectory, context: CheckContext) -> list[dict]:  # type: ignore[type-arg]
    return parse_conversation(verifier.build_request(CANCEL, trajectory, context).parts[-1].content)


def test_a_dialogue_within_the_budget_is_shown_whole(context: CheckContext) -> None:
    trajectory = long_dialogue(5)
    rows = shown(LLMVerifier(ScriptedModel()), trajectory, context)
    assert [r["index"] for r in rows] == list(range(len(trajectory.messages) - 1))
    assert not any("elided_messages" in r for r in rows)


def test_over_budget_keeps_the_prerequisite_reads_and_the_last_messages_and_marks_the_rest(
    context: CheckContext,
) -> None:
    trajectory = long_dialogue(60)  # 246 messages; 245 is the pending call
    verifier = LLMVerifier(ScriptedModel(), max_prompt_tokens=4_000, keep_last_messages=6)
    prepared = verifier.prepare(CANCEL, trajectory, context)
    rows = parse_conversation(prepared.request.parts[-1].content)
    lookup = {"id": "r0", "name": "get_reservation_details", "arguments": {"reservation_id": "ZFA04Y"}}
    assert rows[:4] == [
        {"elided_messages": 1, "first_index": 0, "last_index": 0},
        {"index": 1, "role": "assistant", "tool_calls": [lookup]},  # the call that made the prerequisite read
        {"index": 2, "role": "tool", "tool_call_id": "r0", "name": "get_reservation_details", "content": RESERVATION},
        {"elided_messages": 236, "first_index": 3, "last_index": 238},
    ]
    assert [r["index"] for r in rows[4:]] == list(range(239, 245))  # the last six messages
    assert prepared.view.elided == 237
    assert prepared.estimated_tokens <= 4_000
    assert prepared.estimated_tokens == sum(estimate_tokens(p.content) for p in prepared.request.parts)
    assert sorted(prepared.view.citable) == [1, 2, *range(239, 245)]


def test_an_elided_message_cannot_be_cited(context: CheckContext) -> None:
    trajectory = long_dialogue(60)
    items = [
        {"id": "CR-1", "status": "MET", "evidence": "2", "evidence_messages": [2]},
        {"id": "CR-2", "status": "MET", "evidence": "100", "evidence_messages": [100]},
        {"id": "G-CONFIRM", "status": "MET", "evidence": "244", "evidence_messages": [244]},
    ]
    text = json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})
    verifier = LLMVerifier(ScriptedModel([text]), max_prompt_tokens=4_000, keep_last_messages=6)
    decision = verifier.verify(CANCEL, trajectory, context)
    assert decision.outcome == "block"
    assert [r.status for r in decision.requirements] == ["MET", "NOT_MET", "MET"]
    assert decision.inconsistency is not None
    assert "CR-2 judged MET but cites message(s) 100, which were not shown to the verifier" in decision.inconsistency


def test_only_the_newest_result_of_a_repeated_read_is_kept(context: CheckContext) -> None:
    trajectory = long_dialogue(60, reread=True)  # the reservation is read again in round 30 (messages 124, 125)
    verifier = LLMVerifier(ScriptedModel(), max_prompt_tokens=4_000, keep_last_messages=6)
    indexes = [r.get("index") for r in shown(verifier, trajectory, context)]
    assert 124 in indexes and 125 in indexes  # the newer read and its call
    assert 2 not in indexes and 1 not in indexes


def test_when_even_the_kept_messages_do_not_fit_the_verifier_blocks_without_calling_the_model(
    context: CheckContext,
) -> None:
    model = ScriptedModel()
    verifier = LLMVerifier(model, max_prompt_tokens=1_500, keep_last_messages=6)
    decision = verifier.verify(CANCEL, long_dialogue(60), context)
    assert decision.outcome == "block" and decision.stage == "verifier_error"
    assert decision.error is not None
    assert decision.error.startswith("PromptBudgetError: the verifier prompt does not fit its budget of 1,500")
    assert "237 messages elided" in decision.error
    assert model.calls == []


@pytest.mark.parametrize(("budget", "keep"), [(0, 10), (-5, 10), (100, -1)])
def test_a_nonsensical_budget_is_a_config_error(budget: int, keep: int) -> None:
    with pytest.raises(ConfigError, match="max_prompt_tokens"):
        LLMVerifier(ScriptedModel(), max_prompt_tokens=budget, keep_last_messages=keep)


def test_a_50k_message_dialogue_fits_the_default_budget(context: CheckContext) -> None:
    trajectory = long_dialogue(12_500)  # 50,006 messages
    assert len(trajectory.messages) == 50_006
    started = time.perf_counter()
    prepared = LLMVerifier(ScriptedModel()).prepare(CANCEL, trajectory, context)
    elapsed = time.perf_counter() - started
    assert prepared.estimated_tokens <= DEFAULT_MAX_PROMPT_TOKENS
    # shown: the lookup and its call, the last 40 messages and the call of the first tool result among them
    assert prepared.view.elided == 50_005 - 2 - 40 - 1
    assert {1, 2, 50_004} <= set(prepared.view.citable)
    assert elapsed < 30  # measured ~1 s on 2 shared cores; the bound only catches a quadratic path
