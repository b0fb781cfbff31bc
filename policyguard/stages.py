"""The stage Protocols: each stage looks at one pending call and decides.

The guard runs its stages in order: the front checks, the deterministic gate,
then the verifier model. A stage returns a :class:`Decision`; ``escalate``
hands the call on to the next stage (keeping the requirement results the stage
did prove), and a chain that ends on ``escalate`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from policyguard.checklist.schema import Checklist
from policyguard.decision import Decision
from policyguard.trajectory.messages import ToolCall, Trajectory


@dataclass(frozen=True)
class CheckContext:
    """What every stage knows besides the call and the dialogue.

    ``principal`` is the authenticated user the agent acts for, when the
    integrator knows it (never taken from what the user typed). ``now`` is the
    checklist's declared clock when it has one, else the wall clock.
    """

    checklist: Checklist
    policy_text: str
    now: datetime
    principal: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Gate(Protocol):
    """The deterministic layer: proves what can be proven, costs no model call."""

    def check(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision: ...


@runtime_checkable
class Verifier(Protocol):
    """The model layer: judges the requirements the gate cannot prove."""

    def verify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision: ...

    async def averify(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision: ...


class FrontCheck(Protocol):
    """A refusal before the gate: a block for a mutating call no stage may judge as it stands, else None.

    An unknown tool, arguments outside the limits, an ambiguous call id, an
    amount no approval could allow. The guard has put the call's argument hash,
    taken once per decision, in ``context.extra["args_sha256"]``.
    """

    def refuse(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision | None: ...
