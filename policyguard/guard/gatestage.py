"""The gate stage: the configured deterministic gate, failing closed, then the approval threshold.

With no gate every requirement of the tool is handed on UNVERIFIED. A gate
that raises blocks (``gate_error``). A decision the gate did not block is
blocked when the call's amount is above the tool's ``approval_threshold`` and
no approval is proven (:func:`policyguard.gate.effects.approval_problem`). When
the check was given the host's read tools and the gate blocked for evidence the
dialogue lacks, the guard makes those reads and judges again (:mod:`.fetching`).
"""

from __future__ import annotations

from typing import Any

from policyguard.decision import Decision, RequirementResult
from policyguard.gate.effects import approval_problem
from policyguard.stages import CheckContext
from policyguard.trajectory.messages import ToolCall, Trajectory

from .calls import context_ids
from .settings import GuardSettings


class GateStage:
    """The guard's gate as a :class:`~policyguard.stages.Gate` that never raises."""

    __slots__ = ("settings",)

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        ids = context_ids(call, context)
        gate = self.settings.gate
        if gate is None:
            decision = Decision.escalate(
                "guard",
                requirements=[
                    RequirementResult(id=r.id, status="UNVERIFIED", judged_by="none")
                    for r in self.settings.checklist.requirements_for(call.name)
                ],
                **ids,
            )
        else:
            try:
                decision = gate.check(call, trajectory, context).model_copy(update=ids)
                fetcher = context.extra.get("fetch")
                if fetcher is not None and decision.outcome == "block" and decision.stage == "gate":
                    decision = self._fetched(gate, call, trajectory, context, decision, fetcher)
            except Exception as exc:  # the gate must fail closed too
                return Decision.block(
                    "gate_error",
                    "The policy check for this action failed, so it was not performed. "
                    "Do not retry it now; explain that it cannot be completed at the moment.",
                    error=f"{type(exc).__name__}: {exc}",
                    **ids,
                )
        return self._approved(call, decision, ids)

    def _fetched(
        self, gate: Any, call: ToolCall, trajectory: Trajectory, context: CheckContext, decision: Decision, fetcher: Any
    ) -> Decision:
        """The decision after the reads the guard made itself (:mod:`.fetching`), each one traced."""
        from .fetching import judge_with_fetches

        decision, made = judge_with_fetches(self.settings, gate, call, trajectory, context, decision, fetcher)
        for read in made:
            self.settings.trace.emit("fetch", for_call_id=call.id, **read.event())
        hook = context.extra.get("on_fetched")
        if made and hook is not None:
            hook([(read.call, read.content, read.is_error or read.problem is not None) for read in made])
        return decision

    def _approved(self, call: ToolCall, decision: Decision, ids: dict[str, Any]) -> Decision:
        """The gate's decision, blocked when an amount above the approval threshold has no proven approval."""
        spec = self.settings.checklist.tool_spec(call.name)
        if decision.outcome in ("block", "halt") or spec is None or spec.effect is None:
            return decision
        problem = approval_problem(spec.effect, call.arguments, decision.requirements)
        if problem is None:
            return decision
        result = RequirementResult(id="effect-approval", status="NOT_MET", evidence=problem, judged_by="gate")
        return Decision.block("gate", problem, requirements=[*decision.requirements, result], **ids)
