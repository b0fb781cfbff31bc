"""An approval waives only what failed: requirements the gate could not judge still go to the verifier."""

from __future__ import annotations

from typing import Any

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision, RequirementResult
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import ToolCall, Trajectory

from .conftest import Rig, checklist_data, refund_call


def with_procedure() -> Checklist:
    data = checklist_data()
    data["tools"]["issue_refund"]["requirements"].append(
        {
            "id": "refund.user_confirmed",
            "text": "The user confirmed the amount.",
            "kind": "procedural",
            "source": "Every refund states a reason.",
        }
    )
    return Checklist.model_validate(data)


class FakeVerifier:
    """Judges the procedural requirement as told; records that it was asked."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.asked: list[str] = []

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        self.asked.append(call.id)
        result = RequirementResult(id="refund.user_confirmed", status=self.status, judged_by="verifier")  # type: ignore[arg-type]
        ids: dict[str, Any] = {"call_id": call.id, "tool": call.name, "args_sha256": call.args_sha256}
        if self.status == "MET":
            return Decision.allow("verifier", requirements=[result], **ids)
        return Decision.block("verifier", "Ask the user to confirm the amount.", requirements=[result], **ids)

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        return self.verify(call, trajectory, context)


def test_the_verifier_still_judges_what_the_gate_left_open(rig: Rig) -> None:
    verifier = FakeVerifier("MET")
    guard = rig.guard_with(checklist=with_procedure(), verifier=verifier, allow_unverified=False)
    decision = rig.check(refund_call("c1"), guard=guard)
    assert verifier.asked == ["c1"] and decision.awaiting_approval
    [request] = rig.queue.pending()
    statuses = {r.id: r.status for r in request.requirements}
    assert statuses["refund.user_confirmed"] == "MET" and statuses["effect-approval"] == "NOT_MET"


def test_a_verifier_block_on_a_requirement_no_person_may_waive_is_a_block(rig: Rig) -> None:
    verifier = FakeVerifier("NOT_MET")
    guard = rig.guard_with(checklist=with_procedure(), verifier=verifier, allow_unverified=False)
    decision = rig.check(refund_call("c1"), guard=guard)
    assert (decision.outcome, decision.stage) == ("block", "verifier")
    assert rig.queue.all() == []


def test_without_a_verifier_an_unjudged_requirement_is_not_waived(rig: Rig) -> None:
    guard = rig.guard_with(checklist=with_procedure(), allow_unverified=False)
    decision = rig.check(refund_call("c1"), guard=guard)
    assert decision.outcome == "block" and rig.queue.all() == []
