"""The stage Protocols: each stage looks at one pending call and decides.

The guard runs its stages in order: the front checks, the deterministic gate,
then the verifier model. A stage returns a :class:`Decision`; ``escalate``
hands the call on to the next stage (keeping the requirement results the stage
did prove), and a chain that ends on ``escalate`` blocks. After the chain, a
block that only a person may lift goes to the :class:`Approver`, and an allow
is bound to its call by the :class:`Granter`.
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


PAIRED_VIEW = "paired_view"
"""The ``context.extra`` key of a dialogue's calls paired once per decision (see :class:`FrontCheck`)."""


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
    taken once per decision, in ``context.extra["args_sha256"]``. A front that
    pairs a dialogue's calls with their results leaves ``(trajectory, view)`` in
    ``context.extra[PAIRED_VIEW]`` (a :class:`~policyguard.trajectory.messages.ToolResultsView`),
    so the gate reuses the pairing of that very trajectory instead of pairing it again.
    """

    def refuse(self, call: ToolCall, trajectory: Trajectory, context: CheckContext) -> Decision | None: ...


class Approver(Protocol):
    """A person's say on ``decision``, a block only approvable requirements caused.

    An allow on an approval a reviewer gave for exactly this call (spent once),
    a block on a reviewer's deny or an unreachable queue, else
    :meth:`Decision.await_approval` for the request waiting in the queue.
    ``args_sha256`` is the argument hash the guard took for this decision;
    ``place`` which issuance of the call this is, for deny wins
    (:func:`policyguard.guard.calls.call_place`).
    """

    def ask(
        self,
        call: ToolCall,
        trajectory: Trajectory,
        decision: Decision,
        *,
        args_sha256: str,
        session_id: str | None,
        place: str = "",
    ) -> Decision: ...


class Granter(Protocol):
    """Binds an allow to its call with a signed grant the executor checks; any other decision is returned as is."""

    def grant(
        self, call: ToolCall, decision: Decision, *, args_sha256: str, session_id: str | None, place: str = ""
    ) -> Decision: ...
