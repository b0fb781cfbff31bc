"""A one-shot check pairs the dialogue's calls with their results once: the front's pairing is the gate's.

The front refuses an ambiguous dialogue by pairing it; the gate then reads the
same pairing (``context.extra[PAIRED_VIEW]``) instead of walking the whole
dialogue again, but only for that very trajectory object: a dialogue the gate is
handed otherwise (reads it fetched, a caller's own context) is paired afresh.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from policyguard import HardGate, parse_checklist
from policyguard.guard.core import Guard
from policyguard.stages import PAIRED_VIEW, CheckContext
from policyguard.trajectory.formats import to_trajectory
from policyguard.trajectory.inputs import as_call
from policyguard.trajectory.messages import ToolResultsView

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
    assert gate.check(as_call(bags("w1", 1)), addition, context).outcome != "block"  # the gate proves nothing against it
    context.extra[PAIRED_VIEW] = (addition, ToolResultsView(addition))  # another dialogue's pairing
    assert gate.check(as_call(bags("w1", 1)), removal, context).outcome == "block"
