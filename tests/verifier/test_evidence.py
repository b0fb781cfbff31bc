"""The verifier's answer is checked, not only parsed: a MET must cite messages the model was shown.

The ``trajectory`` fixture: 0 system, 1 user asks, 2 agent looks up (call_1),
3 the reservation's tool result, 4 the agent lists the details and asks, 5 the
user says yes, 6 the pending cancel.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from policyguard import Checklist, Guard, Message, ScriptedModel, ToolCall, Trajectory
from policyguard.checklist.schema import Requirement
from policyguard.stages import CheckContext
from policyguard.verifier.evidence import is_confirmation
from policyguard.verifier.llm import CONFIRM_REMEDIATION, DEFAULT_REMEDIATION, LLMVerifier

ALL = ("CR-1", "CR-2", "G-CONFIRM")


def answer(cites: dict[str, list[int]], verdict: str = "PASS", status: str = "MET", remediation: str = "") -> str:
    """Every requirement judged ``status``; ``cites`` gives each id's citations (default: 3 and 5)."""
    items = [
        {"id": rid, "status": status, "evidence": "see the cited messages", "evidence_messages": cites.get(rid, [3, 5])}
        for rid in ALL
    ]
    return json.dumps({"requirements": items, "verdict": verdict, "remediation": remediation})


def decide(text: str, call: ToolCall, trajectory: Trajectory, context: CheckContext, **kw: object):  # type: ignore[no-untyped-def]
    model = ScriptedModel([text])
    decision = LLMVerifier(model, **kw).verify(call, trajectory, context)  # type: ignore[arg-type]
    model.assert_complete()
    return decision


def status_of(decision, rid: str) -> str:  # type: ignore[no-untyped-def]
    return next(r.status for r in decision.requirements if r.id == rid)


def test_a_pass_whose_citations_hold_is_allowed(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    decision = decide(answer({}), cancel_call, trajectory, context)
    assert decision.outcome == "allow" and decision.inconsistency is None


@pytest.mark.parametrize(
    ("cites", "reason"),
    [
        ([], "cites no message"),
        ([99], "cites message(s) 99, which do not exist (the dialogue has 7)"),
        ([7], "cites message(s) 7, which do not exist"),
        ([-1], "cites message(s) -1, which do not exist"),
        ([3, 42], "cites message(s) 42, which do not exist"),
        ([6], "cites message(s) 6, which were not shown"),  # the pending call itself
        ([0], "cites message(s) 0, which were not shown"),  # the agent's system prompt (never shown)
    ],
)
def test_a_pass_with_invented_citations_blocks(
    cites: list[int], reason: str, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    decision = decide(answer({"CR-1": cites}), cancel_call, trajectory, context)
    assert decision.outcome == "block" and decision.stage == "verifier"
    assert status_of(decision, "CR-1") == "NOT_MET"
    assert [status_of(decision, rid) for rid in ("CR-2", "G-CONFIRM")] == ["MET", "MET"]
    assert decision.inconsistency is not None
    assert f"verifier_evidence: CR-1 judged MET but {reason}" in decision.inconsistency
    evidence = next(r.evidence for r in decision.requirements if r.id == "CR-1") or ""
    assert evidence.startswith("verifier_evidence: the MET was rejected")
    assert decision.message == DEFAULT_REMEDIATION


def test_a_scripted_model_claiming_pass_with_made_up_citations_everywhere_blocks(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    invented = answer({rid: [17, 23] for rid in ALL})
    decision = decide(invented, cancel_call, trajectory, context)
    assert decision.outcome == "block"
    assert [r.status for r in decision.requirements] == ["NOT_MET"] * 3
    assert decision.inconsistency is not None and decision.inconsistency.count("verifier_evidence:") == 3
    assert [line.split(" judged MET")[0] for line in decision.verifier_evidence] == list(ALL)


def test_rejected_citations_reach_the_trace_as_verifier_evidence(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    model = ScriptedModel([answer({"CR-1": [99]})])
    guard = Guard(context.checklist, context.policy_text, verifier=LLMVerifier(model), clock=lambda: context.now)
    decision = guard.check(cancel_call, trajectory)
    event = [e for e in guard.trace.events if e["event"] == "decision"][-1]
    assert decision.outcome == "block"
    assert event["verifier_evidence"] == decision.verifier_evidence
    assert decision.verifier_evidence[0].startswith("CR-1 judged MET but cites message(s) 99")


def test_an_answer_without_the_citation_field_parses_but_its_mets_are_rejected(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    items = [{"id": rid, "status": "MET", "evidence": "[3] and [5] show it"} for rid in ALL]
    text = json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})
    decision = decide(text, cancel_call, trajectory, context)
    assert decision.stage == "verifier" and decision.outcome == "block"
    assert [r.status for r in decision.requirements] == ["NOT_MET"] * 3


@pytest.mark.parametrize("bad", [["3"], [3.0], [True], "3", [[3]]])
def test_citations_that_are_not_integers_are_an_unreadable_answer(
    bad: object, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    data = json.loads(answer({}))
    data["requirements"][0]["evidence_messages"] = bad
    decision = decide(json.dumps(data), cancel_call, trajectory, context)
    assert decision.stage == "verifier_error" and decision.outcome == "block"


def test_not_met_and_not_applicable_need_no_citation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    data = json.loads(answer({}))
    data["requirements"][1].update(status="NOT_APPLICABLE", evidence_messages=[])
    assert decide(json.dumps(data), cancel_call, trajectory, context).outcome == "allow"
    data["requirements"][1].update(status="NOT_MET", evidence_messages=[99])
    decision = decide(json.dumps(data), cancel_call, trajectory, context)
    assert decision.outcome == "block" and decision.inconsistency is not None
    assert "verifier_evidence" not in decision.inconsistency


# -------------------------------------------------------------- confirmations


def test_a_confirmation_must_cite_the_users_message_after_the_agents_last_statement(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    assert decide(answer({"G-CONFIRM": [5]}), cancel_call, trajectory, context).outcome == "allow"
    for cites in ([1], [3], [4], [1, 4]):  # the request before the details, a tool result, the agent's own words
        decision = decide(answer({"G-CONFIRM": cites}), cancel_call, trajectory, context)
        assert status_of(decision, "G-CONFIRM") == "NOT_MET", cites
        assert decision.inconsistency is not None
        assert "cites no user message after the agent's last message to the user (4)" in decision.inconsistency
        assert decision.message == CONFIRM_REMEDIATION


def test_a_yes_given_before_the_agent_changed_the_details_is_not_a_confirmation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    messages = list(trajectory.messages)
    messages.insert(6, Message(role="assistant", content="Actually, the refund goes to a travel certificate instead."))
    changed = Trajectory(messages=messages)
    decision = decide(answer({"G-CONFIRM": [5]}), cancel_call, changed, context)
    assert status_of(decision, "G-CONFIRM") == "NOT_MET" and decision.outcome == "block"


def test_reads_after_the_yes_do_not_void_the_confirmation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """The agent may look something up after the user agreed: a message with a tool call is not a statement."""
    check = ToolCall(id="call_2", name="get_reservation_details", arguments={"reservation_id": "ZFA04Y"})
    messages = list(trajectory.messages)
    messages[6:6] = [
        Message(role="assistant", content="Let me check once more.", tool_calls=[check]),
        Message(role="tool", tool_call_id="call_2", content='{"reservation_id": "ZFA04Y"}'),
    ]
    decision = decide(answer({"G-CONFIRM": [5]}), cancel_call, Trajectory(messages=messages), context)
    assert decision.outcome == "allow"


def test_without_any_agent_statement_no_confirmation_can_stand(cancel_call: ToolCall, context: CheckContext) -> None:
    bare = Trajectory(
        messages=[
            Message(role="user", content="Cancel ZFA04Y, and yes, I confirm."),
            Message(role="assistant", tool_calls=[cancel_call]),
        ]
    )
    decision = decide(answer({rid: [0] for rid in ALL}), cancel_call, bare, context)
    assert status_of(decision, "G-CONFIRM") == "NOT_MET"
    assert status_of(decision, "CR-1") == "MET"
    assert decision.inconsistency is not None
    assert "the agent said nothing to the user before the action" in decision.inconsistency


def test_the_synthetic_requirement_of_a_bare_tool_is_a_confirmation_in_checklist_modes(
    trajectory: Trajectory, context: CheckContext
) -> None:
    bare = replace(context, checklist=context.checklist.model_copy(update={"general_rules": []}))
    call = ToolCall(id="c1", name="ping_partner", arguments={})

    def one(cites: list[int]) -> str:
        items = [{"id": "policy", "status": "MET", "evidence": "x", "evidence_messages": cites}]
        return json.dumps({"requirements": items, "verdict": "PASS", "remediation": ""})

    assert decide(one([5]), call, trajectory, bare).outcome == "allow"
    assert decide(one([3]), call, trajectory, bare).outcome == "block"
    assert decide(one([3]), call, trajectory, bare, mode="raw").outcome == "allow"  # the whole policy: no rule


GUIDE_WORDING = "The agent told the member the new due date and the member said yes."
"""docs/checklists/writing.md's confirmation requirement: no "user", no "confirm"."""


def with_confirmation_rule(context: CheckContext, text: str, **fields: object) -> CheckContext:
    """``context`` whose general rule G-CONFIRM has ``text`` (and ``fields``, e.g. ``confirmation=True``)."""
    data = context.checklist.model_dump(mode="json", exclude_none=True)
    source = data["general_rules"][0]["source"]
    data["general_rules"] = [{"id": "G-CONFIRM", "text": text, "kind": "procedural", "source": source, **fields}]
    return replace(context, checklist=Checklist.model_validate(data))


def test_a_flagged_confirmation_in_the_guides_wording_must_cite_the_users_reply(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """Citing the agent's own message (4) or the request before it (1) blocks; the user's "yes" (5) passes."""
    flagged = with_confirmation_rule(context, GUIDE_WORDING, confirmation=True)
    assert decide(answer({"G-CONFIRM": [5]}), cancel_call, trajectory, flagged).outcome == "allow"
    assert decide(answer({"G-CONFIRM": [4, 5]}), cancel_call, trajectory, flagged).outcome == "allow"
    for cites in ([4], [1], [3, 4]):
        decision = decide(answer({"G-CONFIRM": cites}), cancel_call, trajectory, flagged)
        assert decision.outcome == "block" and status_of(decision, "G-CONFIRM") == "NOT_MET", cites
        assert decision.verifier_evidence == [
            "G-CONFIRM judged MET but is a confirmation, but cites no user message after the agent's last "
            "message to the user (4); counted as NOT_MET"
        ]
        assert decision.message == CONFIRM_REMEDIATION


@pytest.mark.parametrize("cites", [[99], [7], [5, 42], [-5]])
def test_a_flagged_confirmation_citing_a_message_that_does_not_exist_blocks(
    cites: list[int], cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    flagged = with_confirmation_rule(context, GUIDE_WORDING, confirmation=True)
    decision = decide(answer({"G-CONFIRM": cites}), cancel_call, trajectory, flagged)
    assert decision.outcome == "block" and status_of(decision, "G-CONFIRM") == "NOT_MET"
    assert "which do not exist" in decision.verifier_evidence[0]


def test_the_flag_not_the_wording_makes_a_requirement_a_confirmation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """A neutral text with the flag needs the user's reply; without it, citing the agent's message stands."""
    neutral = "The renewal was agreed in the conversation before this call."
    flagged = with_confirmation_rule(context, neutral, confirmation=True)
    assert decide(answer({"G-CONFIRM": [4]}), cancel_call, trajectory, flagged).outcome == "block"
    assert decide(answer({"G-CONFIRM": [5]}), cancel_call, trajectory, flagged).outcome == "allow"
    plain = with_confirmation_rule(context, neutral)
    assert decide(answer({"G-CONFIRM": [4]}), cancel_call, trajectory, plain).outcome == "allow"


def test_the_guides_wording_without_the_flag_is_still_treated_as_a_confirmation(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """The wording fallback: a checklist that forgot the flag loses no check (validate warns about it)."""
    unflagged = with_confirmation_rule(context, GUIDE_WORDING)
    decision = decide(answer({"G-CONFIRM": [4]}), cancel_call, trajectory, unflagged)
    assert decision.outcome == "block" and status_of(decision, "G-CONFIRM") == "NOT_MET"


def test_the_verifier_is_told_which_requirements_are_confirmations(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    flagged = with_confirmation_rule(context, "The renewal was agreed.", confirmation=True)
    request = LLMVerifier(ScriptedModel([])).build_request(cancel_call, trajectory, flagged)
    prompt = request.text()
    rule = next(json.loads(line.rstrip(",")) for line in prompt.splitlines() if '"id":"G-CONFIRM"' in line)
    assert rule["user_confirmation"] is True
    cr1 = next(json.loads(line.rstrip(",")) for line in prompt.splitlines() if '"id":"CR-1"' in line)
    assert "user_confirmation" not in cr1


def test_a_data_requirement_cannot_be_flagged_as_a_confirmation() -> None:
    """No tool result shows what the user said: the flag on a data requirement is a schema error."""
    with pytest.raises(ValidationError, match="confirmation: true is for procedural requirements"):
        Requirement(id="r", text="x", kind="data", source="s", confirmation=True)


def _req(text: str, kind: str = "procedural", confirmation: bool = False) -> Requirement:
    return Requirement(id="r", text=text, kind=kind, source="s", confirmation=confirmation)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        (
            'Before this update the agent listed the details and the user explicitly confirmed with "yes".',
            "procedural",
            True,
        ),
        ("The user confirmed the order id and the exact list of items to return.", "procedural", True),
        ("The USER gave explicit confirmation.", "procedural", True),
        ("The agent confirmed the facts of the complaint with the tools first.", "procedural", False),
        ("The agent obtained the user's reason. The agent confirmed it with the tools.", "procedural", False),
        ("The user confirmed the booking.", "data", False),
        ("The update's arguments match what the user asked for.", "procedural", False),
        (GUIDE_WORDING, "procedural", True),
        ('The customer said "yes" to the fee.', "procedural", True),
        ("The passenger agreed to the new itinerary.", "procedural", True),
        ("The agent got an explicit yes for this change.", "procedural", True),
        ("The agent confirmed the new address with the customer.", "procedural", True),
    ],
)
def test_which_requirements_are_confirmations(text: str, kind: str, expected: bool) -> None:
    assert is_confirmation(_req(text, kind)) is expected


@pytest.mark.parametrize("text", ["The renewal was agreed.", "Done as discussed.", GUIDE_WORDING])
def test_a_flagged_requirement_is_a_confirmation_whatever_its_wording(text: str) -> None:
    assert is_confirmation(_req(text, confirmation=True)) is True


# -------------------------------------------------------------- the trace


def test_the_rejection_is_recorded_in_the_trace(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    guard = Guard(
        context.checklist,
        context.policy_text,
        verifier=LLMVerifier(ScriptedModel([answer({"CR-2": [31337]})])),
        clock=lambda: context.now,
    )
    decision = guard.check(cancel_call, trajectory)
    assert decision.outcome == "block"
    event = next(e for e in guard.trace.events if e["event"] == "decision")
    assert "verifier_evidence: CR-2 judged MET but cites message(s) 31337" in event["inconsistency"]
    assert {"id": "CR-2", "status": "NOT_MET"}.items() <= next(
        r for r in event["requirements"] if r["id"] == "CR-2"
    ).items()


def test_more_citations_than_the_limit_are_an_unreadable_answer(
    cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    from policyguard.verifier.verdict import MAX_CITATIONS

    data = json.loads(answer({}))
    data["requirements"][0]["evidence_messages"] = [3] * (MAX_CITATIONS + 1)
    decision = decide(json.dumps(data), cancel_call, trajectory, context)
    assert decision.stage == "verifier_error" and decision.error is not None
    assert f"more than {MAX_CITATIONS} cited messages" in decision.error
