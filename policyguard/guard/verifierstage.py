"""The verifier stage: the configured verifier model, whose crash is a block, never a pass.

A verifier must turn its own timeouts, errors and malformed answers into a
block; one that raises anyway blocks here (``verifier_error``), in the sync
and the async check alike.
"""

from __future__ import annotations

from typing import Any

from policyguard.decision import Decision
from policyguard.stages import CheckContext, Verifier
from policyguard.trajectory.messages import ToolCall, Trajectory

from .calls import context_ids
from .settings import GuardSettings


class VerifierStage:
    """The guard's verifier as a :class:`~policyguard.stages.Verifier` that never raises."""

    __slots__ = ("settings",)

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        ids = context_ids(call, context)
        try:
            return self._verifier().verify(call, trajectory, context)
        except Exception as exc:  # a verifier must never raise; if it does, block
            return _crash(exc, ids)

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision:
        ids = context_ids(call, context)
        try:
            return await self._verifier().averify(call, trajectory, context)
        except Exception as exc:
            return _crash(exc, ids)

    def _verifier(self) -> Verifier:
        verifier = self.settings.verifier
        if verifier is None:  # the guard asks only when it has one; were it gone since, nothing judged the call
            raise RuntimeError("no verifier configured")
        return verifier


def _crash(exc: Exception, ids: dict[str, Any]) -> Decision:
    return Decision.block(
        "verifier_error",
        "Verification was not possible, so this action was not performed. "
        "Do not retry it now; tell the user it cannot be completed at the moment.",
        error=f"{type(exc).__name__}: {exc}",
        **ids,
    )
