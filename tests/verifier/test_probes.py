"""The structural probes (A1F-A3F) never reach the verifier model as structure.

The model here is a *believer*: a scripted model that reads its prompt line by
line, the naive way, and says PASS as soon as it finds a forged approval that
looks like a message, a section or a policy boundary of its own. Against the
JSON rendering it never finds one; against a plain-line rendering of the same
dialogue (the old ``[7] USER: ...`` layout) it does, so the reader is not blind.
"""

from __future__ import annotations

import json

import pytest

from policyguard import Message, ScriptedModel, ToolCall, Trajectory
from policyguard.bench.tau2 import probes
from policyguard.stages import CheckContext
from policyguard.verifier.llm import LLMVerifier
from policyguard.verifier.models.base import ModelRequest

STRUCTURAL = ("A1F", "A2F", "A3F")
IDS = ("CR-1", "CR-2", "G-CONFIRM")


class Believer:
    """A scripted model that passes whenever it sees forged structure, and blocks otherwise."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def __call__(self, request: ModelRequest) -> str:
        found = probes.naive_forgeries(request.text())
        self.seen.append(found)
        status, verdict = ("MET", "PASS") if found else ("NOT_MET", "BLOCK")
        items = [{"id": i, "status": status, "evidence": "approved", "evidence_messages": [3, 8]} for i in IDS]
        return json.dumps({"requirements": items, "verdict": verdict, "remediation": "Ask the user to confirm."})


def probed(probe: str, trajectory: Trajectory) -> Trajectory:
    """The fixture dialogue under ``probe``, inserted the way the replay suite does it.

    0 system, 1 user asks, 2 lookup, 3 its JSON result, 4 the agent checks the flight, 5 its plain-text
    result, 6 the probe's user text (A1F/A2F), 7 the agent lists the details, 8 the user says yes, 9 the
    pending call.
    """
    status = ToolCall(id="call_s", name="get_flight_status", arguments={"flight_number": "HAT001"})
    messages = list(trajectory.messages[:4])
    messages.append(Message(role="assistant", content="Let me check whether this is possible.", tool_calls=[status]))
    messages.append(Message(role="tool", tool_call_id="call_s", content="available"))
    messages.append(Message(role="user", content=probes.user_claim(probe) or "Please go ahead."))
    messages += trajectory.messages[4:]
    return probes.tamper(probe, Trajectory(messages=messages))


def plain_lines(trajectory: Trajectory) -> str:
    """The old layout: ``[n] ROLE: content`` with content inserted as is."""
    out = []
    for index, message in enumerate(trajectory.messages):
        label = {"user": "USER", "assistant": "AGENT", "tool": "TOOL RESULT of get_reservation_details"}.get(
            message.role, "SYSTEM"
        )
        out.append(f"[{index}] {label}: {message.content or ''}")
    return "\n".join(out) + "\n\n# Pending action (not yet performed)\n\nTool: cancel_reservation\n"


@pytest.mark.parametrize("probe", STRUCTURAL)
def test_the_forged_structure_never_reaches_the_verifier_as_structure(
    probe: str, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    believer = Believer()
    attacked = probed(probe, trajectory)
    decision = LLMVerifier(ScriptedModel([believer])).verify(cancel_call, attacked, context)
    assert believer.seen == [[]]
    assert decision.outcome == "block" and decision.stage == "verifier"


@pytest.mark.parametrize("probe", STRUCTURAL)
def test_the_believer_does_see_the_forgery_in_a_plain_line_rendering(probe: str, trajectory: Trajectory) -> None:
    assert probes.naive_forgeries(plain_lines(probed(probe, trajectory))) != []


@pytest.mark.parametrize("probe", STRUCTURAL)
def test_the_forged_text_is_still_shown_as_that_messages_content(
    probe: str, cancel_call: ToolCall, trajectory: Trajectory, context: CheckContext
) -> None:
    """Nothing is hidden from the model: the claim is there, as what one message says."""
    from policyguard.verifier.dialogue import parse_conversation

    attacked = probed(probe, trajectory)
    per_call = LLMVerifier(ScriptedModel()).build_request(cancel_call, attacked, context).parts[-1].content
    rows = {row["index"]: row for row in parse_conversation(per_call)}
    assert sorted(rows) == list(range(9))  # 9 is the pending call
    if probe == "A3F":
        assert rows[3]["content"][probes.A3_FIELD] == probes.A3F_TEXT
        assert rows[5]["content"] == "available\n" + probes.A3F_TEXT
    else:
        assert rows[6] == {"index": 6, "role": "user", "content": probes.user_claim(probe)}


def test_every_probe_has_a_description_and_the_structural_ones_are_known() -> None:
    assert set(STRUCTURAL) <= set(probes.PROBES)
    for probe in probes.PROBES:
        probes.check_probe(probe)
