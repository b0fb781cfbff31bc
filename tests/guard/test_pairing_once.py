"""A one-shot check pairs the dialogue's calls with their results once: the front's pairing is the gate's.

The front refuses an ambiguous dialogue by pairing it; the gate then reads the
same pairing (``context.extra[PAIRED_VIEW]``) instead of walking the whole
dialogue again, but only for that very trajectory object: a dialogue the gate is
handed otherwise (reads it fetched, a caller's own context) is paired afresh.
The checks that read the dialogue for the pending call's id read it back from
the newest message that names the id, when the pairing knows it, and answer as
a walk over the whole dialogue does.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard import HardGate, parse_checklist
from policyguard.guard.calls import call_place
from policyguard.guard.core import Guard
from policyguard.guard.front import _id_reuse
from policyguard.stages import PAIRED_VIEW, CheckContext
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.inputs import as_call
from policyguard.trajectory.messages import (
    Message,
    PairedMessages,
    Pairing,
    ToolCall,
    ToolResultsView,
    Trajectory,
)

from ..formats.test_pairing import DIALOGUES
from .test_check_history import bags, read
from .test_wrapper_history import CHECKLIST, POLICY


def test_a_write_check_pairs_its_dialogue_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checklist = parse_checklist(CHECKLIST)
    guard = Guard(checklist, POLICY, gate=HardGate(checklist), allow_unverified=True)
    made: list[int] = []
    real = ToolResultsView.__init__

    def counting(self: ToolResultsView, trajectory: Any) -> None:
        made.append(1)
        real(self, trajectory)

    monkeypatch.setattr(ToolResultsView, "__init__", counting)
    messages = [{"role": "user", "content": "Add a bag."}, *read("r1", 2)]
    assert guard.check(bags("w1", 3), messages).outcome == "allow"
    assert made == [1]


def test_the_gate_pairs_a_dialogue_afresh_when_the_kept_pairing_is_of_another() -> None:
    checklist = parse_checklist(CHECKLIST)
    gate = HardGate(checklist)
    removal = to_trajectory([{"role": "user", "content": "Set my bags to 1."}, *read("r1", 3)])  # 3 bags: a removal
    addition = to_trajectory([{"role": "user", "content": "Set my bags to 1."}, *read("r1", 0)])
    context = CheckContext(checklist=checklist, policy_text=POLICY, now=datetime.now(timezone.utc))
    assert (
        gate.check(as_call(bags("w1", 1)), addition, context).outcome != "block"
    )  # the gate proves nothing against it
    context.extra[PAIRED_VIEW] = (addition, ToolResultsView(addition))  # another dialogue's pairing
    assert gate.check(as_call(bags("w1", 1)), removal, context).outcome == "block"


def reference_id_reuse(call: ToolCall, messages: list[Message]) -> str | None:
    """Why the pending call's id cannot name it, walked forward over the whole dialogue (the rule as first
    written): the newest call with the id, and whether a tool message with the id came after it."""
    newest: ToolCall | None = None
    answered = False
    for message in messages:
        if message.role == "tool" and message.tool_call_id == call.id:
            answered = True
        for other in message.tool_calls:
            if other.id == call.id:
                newest, answered = other, False
    if newest is not None and (newest.name, newest.arguments) != (call.name, call.arguments):
        return None if answered else "is used by another call in the dialogue"
    return "was already answered by a tool result" if answered else None


def reference_place(messages: list[Message], call: ToolCall) -> str:
    """The newest assistant message issuing this very call, walked from the end of the whole dialogue."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant" and any(
            (c.id, c.name, c.arguments) == (call.id, call.name, call.arguments) for c in messages[index].tool_calls
        ):
            return str(index)
    return ""


@settings(max_examples=400, deadline=None)
@given(DIALOGUES, st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["get", "set"]), st.integers(0, 1))
def test_an_id_already_used_or_answered_is_found_reading_back_from_where_the_pairing_last_saw_it(
    dialogue: list[Message], call_id: str, name: str, n: int
) -> None:
    call = ToolCall(id=call_id, name=name, arguments={"n": n})
    plain = Trajectory.model_construct(messages=list(dialogue))
    carrying = Trajectory.model_construct(messages=PairedMessages(dialogue, Pairing().feed_all(dialogue).snapshot()))
    assert _id_reuse(call, plain) == _id_reuse(call, carrying) == reference_id_reuse(call, dialogue)
    assert call_place(carrying, call) == call_place(plain, call) == reference_place(dialogue, call)
